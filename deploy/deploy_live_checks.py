"""The live part of //deploy:deploy_test (see deploy_test.py): the cpu-demo
overlay's planner and worker pods on loopback under Debian's Prometheus."""

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request

import yaml

from deploy_support import (
    DEPLOY,
    LAUNCHER,
    LIVE_DEADLINE_SECONDS,
    LIVE_MIN_STEPS,
    LIVE_OVERLAY,
    OVERLAYS,
    PROMETHEUS,
    Planner,
    TMP,
    WORKER_BINARY,
    check,
    find,
    flag_name,
    free_port,
    http_get,
    materialize_volumes,
    metric_names,
    parse_exposition,
    planner_argv,
    remap,
    start,
    stop,
    tail,
    wait_for,
    with_bool,
)


# --- The live job ----------------------------------------------------------------------


class Prometheus:
    def __init__(self, config_dir, log_path):
        self.dir = config_dir
        self.port = None
        self.process = None
        self.log_path = log_path

    def start(self, deadline):
        for _ in range(3):  # a free port may be taken between picking and binding
            self.port = free_port()
            log = open(self.log_path, "a")
            self.process = start([PROMETHEUS, f"--config.file={self.dir}/prometheus.yml",
                                  f"--storage.tsdb.path={self.dir}/data",
                                  f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                                 stdout=log, stderr=log, cwd=self.dir)

            def ready():
                if self.process.poll() is not None:
                    return "exited"
                try:
                    return http_get(f"http://127.0.0.1:{self.port}/-/ready", timeout=1) and "ready"
                except OSError:
                    return None
            if wait_for("Prometheus to be ready", ready, deadline) == "ready":
                return
        raise RuntimeError(f"Prometheus did not start: {tail(open(self.log_path).read())}")

    def api(self, path, **params):
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?" + urllib.parse.urlencode(params, doseq=True)
        body = json.loads(http_get(url, timeout=10))
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, expr):
        return self.api("query", query=expr)["result"]


def finite(result):
    return [r for r in result if r["value"][1] not in ("NaN", "+Inf", "-Inf")]


def write_json(path, value):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(value, f)
    os.replace(tmp, path)


def kubernetes_targets(objects, overlay):
    """Targets Kubernetes pod discovery would give for the overlay's pods (one
    per container port), labelled as it labels them; plus a finished worker
    pod, which the relabelling must drop. The relabelling does not read the
    address: each target gets its own on 127.0.0.0/8 at port 1, where nothing
    listens (and the scrape interval is an hour)."""
    pods = []
    deployment = find(objects, "Deployment", "dcp-planner")
    pods.append(("dcp-planner-5d9c7b6f4-abcde", deployment["spec"]["template"], "Running"))
    job = find(objects, "Job", "dcp-worker")
    for index in range(job["spec"]["completions"]):
        pods.append((f"dcp-worker-{index}-x{index}yz", job["spec"]["template"], "Running"))
    pods.append(("dcp-worker-0-done1", job["spec"]["template"], "Succeeded"))
    groups = []
    for pod_name, template, phase in pods:
        labels = {f"__meta_kubernetes_pod_label_{re.sub(r'[^A-Za-z0-9_]', '_', k)}": v
                  for k, v in template["metadata"]["labels"].items()}
        for container in template["spec"]["containers"]:
            for port in container.get("ports", []):
                address = f"127.1.{len(groups) // 250}.{len(groups) % 250 + 1}:1"
                groups.append({"targets": [address],
                               "labels": dict(labels, **{
                                   "__meta_kubernetes_namespace": f"dcp-{overlay}",
                                   "__meta_kubernetes_pod_name": pod_name,
                                   "__meta_kubernetes_pod_phase": phase,
                                   "__meta_kubernetes_pod_container_name": container["name"],
                                   "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                                   "__meta_kubernetes_pod_container_port_number": str(port["containerPort"]),
                               })})
    return groups


def prepare_prometheus_dir(rendered):
    """prometheus-loopback.yml and the rules, plus jobs `k8s-<overlay>-<job>`
    with prometheus.yml's relabelling over simulated Kubernetes targets."""
    directory = os.path.join(TMP, "prometheus")
    os.makedirs(os.path.join(directory, "targets"))
    shutil.copytree(os.path.join(DEPLOY, "monitoring/prometheus/rules"), os.path.join(directory, "rules"))
    with open(os.path.join(DEPLOY, "monitoring/prometheus/prometheus-loopback.yml")) as f:
        config = yaml.safe_load(f)
    with open(os.path.join(DEPLOY, "monitoring/prometheus/prometheus.yml")) as f:
        kubernetes_config = yaml.safe_load(f)
    for overlay in OVERLAYS:
        targets = kubernetes_targets(rendered[overlay], overlay)
        write_json(os.path.join(directory, "targets", f"k8s-{overlay}.json"), targets)
        for job in kubernetes_config["scrape_configs"]:
            config["scrape_configs"].append({
                "job_name": f"k8s-{overlay}-{job['job_name']}",
                "scrape_interval": "1h",
                "scrape_timeout": "1s",
                "file_sd_configs": [{"files": [f"targets/k8s-{overlay}.json"]}],
                "relabel_configs": job["relabel_configs"],
            })
    for name in ("dcp-planner", "dcp-worker"):
        write_json(os.path.join(directory, "targets", f"{name}.json"), [])
    with open(os.path.join(directory, "prometheus.yml"), "w") as f:
        yaml.safe_dump(config, f)
    return directory


def check_kubernetes_relabelling(prometheus, rendered):
    pools = {f"k8s-{o}-{j}" for o in OVERLAYS for j in ("dcp-planner", "dcp-worker")}

    def discovered():
        targets = prometheus.api("targets", state="active")["activeTargets"]
        return targets if pools <= {t["scrapePool"] for t in targets} else None
    try:
        targets = wait_for("the simulated Kubernetes targets", discovered, time.monotonic() + 30, interval=0.5)
    except TimeoutError as error:
        check("prometheus.yml relabelling on simulated pod discovery", False, str(error))
        return
    problems = []
    for overlay in OVERLAYS:
        job = find(rendered[overlay], "Job", "dcp-worker")
        env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
        ranks, nodes = int(env["DCP_RANKS_PER_NODE"]), job["spec"]["completions"]
        for name, expected in (("dcp-planner", 1), ("dcp-worker", ranks * nodes)):
            pool = [t for t in targets if t["scrapePool"] == f"k8s-{overlay}-{name}"]
            pods = {t["labels"].get("pod") for t in pool}
            ports = {t["discoveredLabels"]["__meta_kubernetes_pod_container_port_name"] for t in pool}
            if len(pool) != expected or any("done" in (p or "") for p in pods) or \
                    any(t["labels"].get("namespace") != f"dcp-{overlay}" for t in pool):
                problems.append(f"{overlay} {name}: {len(pool)} targets (expected {expected}), pods {sorted(pods)}")
            if name == "dcp-planner" and ports != {"metrics"}:
                problems.append(f"{overlay} planner ports {ports}")
            if name == "dcp-worker" and ports != {f"metrics-{i}" for i in range(ranks)}:
                problems.append(f"{overlay} worker ports {sorted(ports)}")
    check("prometheus.yml relabelling (by this Prometheus, on simulated pod discovery of both overlays): "
          "one target per planner and per rank, finished pods dropped", not problems, "; ".join(problems))


def start_live_job(rendered, token):
    """The cpu-demo planner and worker pods on loopback. Returns (planner,
    [(launcher process, log path, node name)])."""
    objects = rendered[LIVE_OVERLAY]
    deployment = find(objects, "Deployment", "dcp-planner")
    planner_pod = deployment["spec"]["template"]
    secret_files = {"dcp-planner-token": {"token": token + "\n"}}
    mounts = materialize_volumes(planner_pod, planner_pod["spec"]["containers"][0], objects,
                                 os.path.join(TMP, "live-planner"), secret_files)
    planner = Planner(planner_argv(deployment, mounts), os.path.join(TMP, "live-planner/planner.log"))
    deadline = time.monotonic() + 30
    grpc_port, _ = planner.wait_serving(deadline)

    job = find(objects, "Job", "dcp-worker")
    pod = job["spec"]["template"]
    container = pod["spec"]["containers"][0]
    launchers = []
    for index in range(job["spec"]["completions"]):
        node = f"{job['metadata']['name']}-{index}"  # the Indexed Job pod's host name
        mounts = materialize_volumes(pod, container, objects, os.path.join(TMP, f"live-{node}"), secret_files)
        env = {"PATH": "/usr/bin:/bin", "HOME": TMP, "HOSTNAME": node}
        for variable in container["env"]:
            env[variable["name"]] = remap(variable["value"], mounts)
        env.update({
            "DCP_PLANNER_ADDRESS": f"127.0.0.1:{grpc_port}",
            "DCP_WORKER_BINARY": WORKER_BINARY,
            "DCP_STORE_HOST": "127.0.0.1",
            "DCP_STORE_PORT_BASE": "0",
            "DCP_METRICS_HOST": "127.0.0.1",
            "DCP_METRICS_PORT_BASE": "0",
        })
        args = [f"--{flag_name(a)}={remap(a.split('=', 1)[1], mounts)}" if "=" in a else a
                for a in container.get("args", [])]
        log_path = os.path.join(TMP, f"live-{node}/launcher.log")
        log = open(log_path, "w")
        process = start(["/bin/bash", LAUNCHER] + args, stdout=log, stderr=log, env=env)
        launchers.append((process, log_path, node))
    return planner, launchers


def worker_metrics_ports(launchers, ranks):
    ports = {}
    for process, log_path, node in launchers:
        if process.poll() is not None:
            raise RuntimeError(f"the launcher of {node} exited with {process.returncode}:\n"
                               f"{tail(open(log_path).read())}")
        with open(log_path) as f:
            for worker_id, port in re.findall(r"dcp_worker (\S+): metrics on port (\d+)", f.read()):
                ports[worker_id] = int(port)
    return ports if len(ports) == ranks else None


def check_live(rendered, rules, dashboard, namespace_query):
    deadline = time.monotonic() + LIVE_DEADLINE_SECONDS
    job = find(rendered[LIVE_OVERLAY], "Job", "dcp-worker")
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    world = int(env["DCP_RANKS_PER_NODE"]) * job["spec"]["completions"]

    prometheus = Prometheus(prepare_prometheus_dir(rendered), os.path.join(TMP, "prometheus.log"))
    prometheus.start(time.monotonic() + 30)
    check_kubernetes_relabelling(prometheus, rendered)

    planner, launchers = start_live_job(rendered, secrets.token_hex(16))
    try:
        ports = wait_for("every rank's metrics port", lambda: worker_metrics_ports(launchers, world), deadline)
        metrics_port = planner.ports[1]
        write_json(os.path.join(prometheus.dir, "targets/dcp-planner.json"),
                   [{"targets": [f"127.0.0.1:{metrics_port}"]}])
        write_json(os.path.join(prometheus.dir, "targets/dcp-worker.json"),
                   [{"targets": [f"127.0.0.1:{p}" for p in sorted(ports.values())]}])
        check(f"{LIVE_OVERLAY} job on loopback: planner and {world} ranks ({len(launchers)} launchers) serve metrics",
              True)

        # Every rank has finished a few steps (after profiling).
        def steps_done():
            if planner.process.poll() is not None:
                raise RuntimeError(f"dcp_planner exited: {tail(open(planner.log.name).read())}")
            worker_metrics_ports(launchers, world)  # raises when a launcher died
            result = prometheus.query(
                f"count(dcp_worker_step_seconds) == {world} and on() "
                f'sum(dcp_rpc_requests_total{{method="ReportStepStats", code="OK"}}) >= {world * LIVE_MIN_STEPS}')
            return bool(result)
        wait_for(f"{LIVE_MIN_STEPS} steps of every rank in Prometheus", steps_done, deadline, interval=1)
        check(f"Prometheus scrapes the planner and {world} ranks; {LIVE_MIN_STEPS}+ steps done", True)

        # Metric names: live scrapes of every process.
        exported = parse_exposition(http_get(f"http://127.0.0.1:{metrics_port}/metrics"))
        worker_names = [parse_exposition(http_get(f"http://127.0.0.1:{p}/metrics")) for p in ports.values()]
        for names in worker_names:
            exported |= names
        recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
        expressions = []  # (where, PromQL to run, PromQL as written)
        for group in rules["groups"]:
            for rule in group["rules"]:
                if "record" in rule:
                    expressions.append((f"record {rule['record']}", rule["expr"], rule["expr"]))
                    expressions.append((f"recorded series {rule['record']}", rule["record"], rule["record"]))
                else:
                    expressions.append((f"alert {rule['alert']} (comparison as bool)",
                                        with_bool(rule["expr"]), rule["expr"]))
        for title, ref, expr in dashboard:
            runnable = expr.replace("$__rate_interval", "1m").replace("$namespace", ".*")
            expressions.append((f"dashboard '{title}' {ref}", runnable, expr))
        variable_metric = re.match(r"label_values\((\w+),", namespace_query).group(1)
        expressions.append(("dashboard variable namespace (its metric)", variable_metric, variable_metric))
        # `up` is Prometheus' own; recorded series come from the rules.
        unknown = set()
        used = set()
        for _, _, expr in expressions:
            names = metric_names(expr)
            used |= names
            unknown |= {n for n in names if n not in exported and n not in recorded and n != "up"}
        check(f"{len(used)} metric names in rules and dashboard are exported by the live binaries "
              f"(planner + {len(worker_names)} ranks: {len(exported)} series names)", not unknown,
              f"not exported: {sorted(unknown)}")

        # Every expression returns data (recording rules need an evaluation
        # or two after the data is there).
        pending = dict((where, query) for where, query, _ in expressions)
        def all_answer():
            for where, query in list(pending.items()):
                result = finite(prometheus.query(query))
                if result:
                    del pending[where]
                    print(f"  data: {where}: {len(result)} series, e.g. {result[0]['value'][1]}", flush=True)
            return not pending
        try:
            wait_for("every expression to return data", all_answer, deadline, interval=1)
        except TimeoutError:
            pass
        check(f"{len(expressions)} PromQL expressions of rules and dashboard return data", not pending,
              "no data: " + "; ".join(f"{w}: {q}" for w, q in pending.items()))

        groups = prometheus.api("rules")["groups"]
        unhealthy = [f"{r['name']}: {r.get('lastError')}" for g in groups for r in g["rules"]
                     if r.get("health") != "ok"]
        evaluated = sum(len(g["rules"]) for g in groups)
        check(f"Prometheus evaluates all {evaluated} rules without error", not unhealthy and evaluated ==
              sum(len(g["rules"]) for g in rules["groups"]), "; ".join(unhealthy))

        # SIGTERM: the ranks stop together at a step boundary.
        for process, _, _ in launchers:
            os.kill(process.pid, signal.SIGTERM)
        codes = []
        for process, log_path, node in launchers:
            try:
                codes.append(process.wait(timeout=max(1.0, deadline + 60 - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append(None)
        logs = "".join(open(log_path).read() for _, log_path, _ in launchers)
        stopped = len(re.findall(r"stopped on request after steps", logs))
        check("SIGTERM: every rank stops at a step boundary, each launcher exits 143",
              codes == [143] * len(launchers) and stopped == world,
              f"exit codes {codes}, {stopped} of {world} ranks stopped on request:\n{tail(logs, 20)}")
        code = stop(planner.process)
        check("SIGTERM: dcp_planner drains and exits 0", code == 0, f"exit code {code}")
    finally:
        for process, _, _ in launchers:
            stop(process)
        stop(planner.process)
        stop(prometheus.process)


