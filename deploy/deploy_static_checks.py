"""The static checks of //deploy:deploy_test (see deploy_test.py): linters,
rendered manifests, overlay consistency, monitoring files, promtool and the
Dockerfiles' runtime packages."""

import json
import os
import re
import time

import yaml

from deploy_support import (
    DEPLOY,
    HADOLINT,
    KUBERNETES_VALIDATE,
    KUBERNETES_VERSIONS,
    LAUNCHER,
    LIVE_OVERLAY,
    OVERLAYS,
    PLANNER_BINARY,
    PROMTOOL,
    Planner,
    SHELLCHECK,
    TMP,
    WORKER_BINARY,
    YAMLLINT,
    check,
    find,
    flag_name,
    matches,
    materialize_volumes,
    objects_of,
    planner_argv,
    render,
    run,
    stop,
    tail,
)


# --- Static checks -------------------------------------------------------------------


def check_lint():
    yaml_files = []
    for directory, _, files in os.walk(DEPLOY):
        yaml_files += [os.path.join(directory, f) for f in files if f.endswith((".yaml", ".yml"))]
    result = run([YAMLLINT, "--strict", "-c", os.path.join(DEPLOY, ".yamllint.yaml")] + sorted(yaml_files))
    check(f"yamllint: {len(yaml_files)} YAML files", result.returncode == 0, result.stdout + result.stderr)

    scripts = [LAUNCHER, os.path.join(DEPLOY, "deploy_test.sh")]
    result = run([SHELLCHECK] + scripts)
    check("shellcheck: dcp-node-launcher.sh, deploy_test.sh", result.returncode == 0, result.stdout)

    dockerfiles = [os.path.join(DEPLOY, "docker", f) for f in ("planner.Dockerfile", "worker.Dockerfile")]
    result = run([HADOLINT, "--config", os.path.join(DEPLOY, "docker/hadolint.yaml")] + dockerfiles)
    check("hadolint: planner.Dockerfile, worker.Dockerfile", result.returncode == 0, result.stdout + result.stderr)


def validate(path, label):
    for version in KUBERNETES_VERSIONS:
        result = run([KUBERNETES_VALIDATE, "--strict", "-k", version, path])
        output = result.stdout + result.stderr
        # Only the Prometheus Operator's kinds may lack a schema.
        unknown = [line for line in output.splitlines() if "Couldn't find schema" in line
                   and "monitoring.coreos.com" not in line]
        check(f"kubernetes-validate --strict -k {version}: {label}",
              result.returncode == 0 and "ERROR" not in output and not unknown, tail(output))


def check_manifests():
    """Renders every kustomization; returns {overlay: objects}."""
    rendered = {}
    for name, directory in [("base", "kubernetes/base")] + \
            [(o, f"kubernetes/overlays/{o}") for o in OVERLAYS] + [("monitoring", "monitoring")]:
        try:
            text = render(os.path.join(DEPLOY, directory))
        except RuntimeError as error:
            check(f"kubectl kustomize {directory}", False, str(error))
            continue
        check(f"kubectl kustomize {directory}", True)
        path = os.path.join(TMP, f"rendered-{name}.yaml")
        with open(path, "w") as f:
            f.write(text)
        validate(path, f"{directory} ({len(objects_of(text))} objects)")
        rendered[name] = objects_of(text)
    validate(os.path.join(DEPLOY, "kubernetes/secrets.example.yaml"), "kubernetes/secrets.example.yaml")
    return rendered


def secret_keys():
    keys = {}
    with open(os.path.join(DEPLOY, "kubernetes/secrets.example.yaml")) as f:
        for secret in objects_of(f.read()):
            keys[secret["metadata"]["name"]] = set(secret.get("stringData", {})) | set(secret.get("data", {}))
    return keys


def memory_quantity_bytes(quantity):
    """A Kubernetes memory quantity ("768Mi", "1Gi", "800M", "1024") in bytes."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
             "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    for suffix, multiplier in units.items():
        if quantity.endswith(suffix) and quantity[:-len(suffix)].isdigit():
            return int(quantity[:-len(suffix)]) * multiplier
    return int(quantity) if quantity.isdigit() else -1


class RenderedOverlay:
    """The objects of one rendered overlay that the consistency checks read,
    looked up once (a missing object fails the lookup)."""

    def __init__(self, name, objects):
        self.name = name
        self.objects = objects
        self.deployment = find(objects, "Deployment", "dcp-planner")
        self.job = find(objects, "Job", "dcp-worker")
        self.planner_service = find(objects, "Service", "dcp-planner")
        self.worker_service = find(objects, "Service", "dcp-workers")
        self.planner_policy = find(objects, "NetworkPolicy", "dcp-planner")
        self.worker_policy = find(objects, "NetworkPolicy", "dcp-worker")
        self.planner_config = find(objects, "ConfigMap", "dcp-planner-config")
        self.worker_config = find(objects, "ConfigMap", "dcp-worker-config")
        find(objects, "PersistentVolumeClaim", "dcp-planner-state")
        find(objects, "Namespace", "dcp")

        self.planner_pod = self.deployment["spec"]["template"]
        self.worker_pod = self.job["spec"]["template"]
        self.planner_labels = self.planner_pod["metadata"]["labels"]
        self.worker_labels = self.worker_pod["metadata"]["labels"]
        self.planner = self.planner_pod["spec"]["containers"][0]
        self.worker = self.worker_pod["spec"]["containers"][0]
        self.planner_ports = {p["name"]: p["containerPort"] for p in self.planner["ports"]}
        self.worker_ports = {p["name"]: p["containerPort"] for p in self.worker["ports"]}
        self.worker_env = {e["name"]: e.get("value") for e in self.worker.get("env", [])}
        self.service_ports = {p["name"]: p for p in self.planner_service["spec"]["ports"]}
        self.ranks = int(self.worker_env.get("DCP_RANKS_PER_NODE", "0"))


def expect_images_and_selectors(o, expect):
    """Images come from the overlay; every selector selects its pods."""
    for container in (o.planner, o.worker):
        expect("/" in container["image"] and ":" in container["image"],
               f"image {container['image']} is not set by the overlay")
    expect(matches(o.deployment["spec"]["selector"]["matchLabels"], o.planner_labels), "Deployment selector")
    expect(matches(o.planner_service["spec"]["selector"], o.planner_labels), "planner Service selector")
    expect(matches(o.worker_service["spec"]["selector"], o.worker_labels), "workers Service selector")
    expect(matches(o.planner_policy["spec"]["podSelector"]["matchLabels"], o.planner_labels),
           "planner NetworkPolicy podSelector")
    expect(matches(o.worker_policy["spec"]["podSelector"]["matchLabels"], o.worker_labels),
           "worker NetworkPolicy podSelector")


def expect_planner_exposure(o, expect):
    """The planner's Service and NetworkPolicy expose exactly its two ports:
    gRPC to the job's workers, metrics to Prometheus."""
    expect(set(o.service_ports) == {"grpc", "metrics"}, f"planner Service ports {sorted(o.service_ports)}")
    for name, port in o.service_ports.items():
        target = port["targetPort"]
        expect(o.planner_ports.get(target, target) == o.planner_ports.get(name), f"Service port {name} target")
    allowed = {}
    for rule in o.planner_policy["spec"]["ingress"]:
        for peer in rule["from"]:
            for port in rule["ports"]:
                allowed.setdefault(port["port"], []).append(peer)
    expect(set(allowed) == {o.planner_ports["grpc"], o.planner_ports["metrics"]},
           f"planner NetworkPolicy ports {sorted(allowed)}")
    expect(all(matches(p["podSelector"]["matchLabels"], o.worker_labels) and "namespaceSelector" not in p
               for p in allowed.get(o.planner_ports["grpc"], [])),
           "only the job's workers may reach the planner's gRPC port")
    expect(all("namespaceSelector" in p for p in allowed.get(o.planner_ports["metrics"], [])),
           "only Prometheus (another namespace) may reach the planner's metrics port")


def expect_worker_discovery(o, expect):
    """The workers find the planner and each other, and register with the
    job id the planner serves."""
    address = o.worker_env.get("DCP_PLANNER_ADDRESS", "")
    expect(address == f"{o.planner_service['metadata']['name']}:{o.service_ports['grpc']['port']}",
           f"DCP_PLANNER_ADDRESS={address}")
    worker_spec = o.worker_service["spec"]
    expect(worker_spec.get("clusterIP") == "None", "dcp-workers is not headless")
    expect(worker_spec.get("publishNotReadyAddresses") is True, "publishNotReadyAddresses")
    expect(o.worker_pod["spec"].get("subdomain") == o.worker_service["metadata"]["name"], "Job subdomain")
    expect(o.worker_env.get("DCP_STORE_DOMAIN") == o.worker_service["metadata"]["name"], "DCP_STORE_DOMAIN")
    expect(o.job["spec"].get("completionMode") == "Indexed", "the worker Job is not Indexed")
    expect(o.worker_pod["spec"]["restartPolicy"] == "Never", "podFailurePolicy needs restartPolicy Never")
    planner_job = [a.split("=", 1)[1] for a in o.planner["args"] if flag_name(a) == "job-id"]
    expect(planner_job and planner_job == [o.worker_env.get("DCP_JOB_ID")],
           f"planner --job-id {planner_job} vs worker DCP_JOB_ID {o.worker_env.get('DCP_JOB_ID')}")


def expect_cluster_fits_job(o, expect):
    """cluster.json matches the worker Job: nodes, ranks, their ports and
    GPUs, /dev/shm and the termination grace."""
    cluster = json.loads(o.planner_config["data"]["cluster.json"])
    json.loads(o.planner_config["data"]["model.json"])
    job_spec = o.job["spec"]
    expect(cluster["num_nodes"] == job_spec["completions"] == job_spec["parallelism"],
           f"num_nodes {cluster['num_nodes']} vs completions {job_spec['completions']}")
    expect(cluster["gpus_per_node"] == o.ranks, f"gpus_per_node {cluster['gpus_per_node']} vs ranks {o.ranks}")
    metrics_base = int(o.worker_env["DCP_METRICS_PORT_BASE"])
    expected_metrics = {f"metrics-{i}": metrics_base + i for i in range(o.ranks)}
    actual_metrics = {k: v for k, v in o.worker_ports.items() if k.startswith("metrics-")}
    expect(actual_metrics == expected_metrics, f"worker metrics ports {actual_metrics}")
    expect(o.worker_ports.get("c10d-store") == int(o.worker_env["DCP_STORE_PORT_BASE"]), "c10d-store port")
    prometheus_ranges = [p for rule in o.worker_policy["spec"]["ingress"] for p in rule.get("ports", [])]
    expect(all(any(r["port"] <= port <= r.get("endPort", r["port"]) for r in prometheus_ranges)
               for port in expected_metrics.values()), "worker NetworkPolicy misses metrics ports")
    gpus = o.worker["resources"].get("limits", {}).get("nvidia.com/gpu")
    if o.name == "h200":
        expect(gpus == o.ranks == 8, f"h200: nvidia.com/gpu {gpus} for {o.ranks} ranks")
    else:
        expect(gpus is None, "cpu-demo asks for GPUs")
    volumes = {v["name"]: v for v in o.worker_pod["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in o.worker["volumeMounts"]}
    shm = volumes.get(mounts.get("/dev/shm"), {}).get("emptyDir", {})
    expect(shm.get("medium") == "Memory" and shm.get("sizeLimit"), "/dev/shm is not a sized memory emptyDir")
    expect(o.worker_pod["spec"]["terminationGracePeriodSeconds"] >= 60, "worker termination grace < 60 s")


def expect_planner_fits_pod(o, expect):
    """The planner's memory budget fits its pod's memory limit, its drain
    (after which planning in flight is abandoned) fits the grace period, and
    its probes: gRPC health on the gRPC port, or (TLS) TCP on it and GET
    /metrics."""
    planner = o.planner
    planner_flags_given = dict(a[2:].split("=", 1) for a in planner["args"] if "=" in a)
    budget = memory_quantity_bytes(planner_flags_given.get("memory-budget", "1Gi"))
    limit = planner["resources"].get("limits", {}).get("memory")
    expect(limit is not None and 0 < budget <= memory_quantity_bytes(limit),
           f"planner --memory-budget={planner_flags_given.get('memory-budget')} exceeds limits.memory {limit}")
    drain = planner_flags_given.get("drain-timeout", "10s")
    expect(drain.endswith("s") and drain[:-1].isdigit() and
           int(drain[:-1]) < o.planner_pod["spec"].get("terminationGracePeriodSeconds", 30),
           f"planner --drain-timeout={drain} does not fit its termination grace period")
    for probe_name in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = planner.get(probe_name)
        expect(probe is not None, f"planner {probe_name} missing")
        if not probe:
            continue
        if "grpc" in probe:
            expect(probe["grpc"]["port"] == o.planner_ports["grpc"], f"{probe_name} port")
            expect(not any(a.startswith("--tls-cert") for a in planner["args"]),
                   f"{probe_name}: grpc probes speak plaintext but the planner serves TLS")
        elif "tcpSocket" in probe:
            expect(probe["tcpSocket"]["port"] in ("grpc", o.planner_ports["grpc"]), f"{probe_name} port")
        else:
            expect(probe.get("httpGet", {}).get("port") in ("metrics", o.planner_ports["metrics"]),
                   f"{probe_name} port")


def expect_mounted_files(o, expect):
    """ConfigMaps and Secrets exist and hold the files the flags name."""
    keys = secret_keys()
    config_maps = {c["metadata"]["name"]: c for c in o.objects if c["kind"] == "ConfigMap"}
    for pod, container in ((o.planner_pod, o.planner), (o.worker_pod, o.worker)):
        pod_volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        files = {}
        for mount in container["volumeMounts"]:
            volume = pod_volumes[mount["name"]]
            if "configMap" in volume:
                name = volume["configMap"]["name"]
                expect(name in config_maps, f"ConfigMap {name} is not rendered")
                files[mount["mountPath"]] = set(config_maps.get(name, {}).get("data", {}))
            elif "secret" in volume:
                name = volume["secret"]["secretName"]
                expect(name in keys, f"Secret {name} is not in secrets.example.yaml")
                files[mount["mountPath"]] = keys.get(name, set())
        values = [a.split("=", 1)[1] for a in container.get("args", []) if "=" in a]
        values += [v for v in o.worker_env.values() if v] if container is o.worker else []
        for value in values:
            for mount_path, names in files.items():
                if value.startswith(mount_path + "/"):
                    expect(value[len(mount_path) + 1:] in names, f"{value}: no such key in the volume")


def expect_known_flags(o, planner_flags, worker_flags, expect):
    """Every flag the manifests pass is one the binaries know."""
    for argument in o.planner["args"]:
        expect(flag_name(argument) in planner_flags, f"dcp_planner has no flag {argument}")
    worker_args = list(o.worker.get("args", []))
    args_file = o.worker_config["data"]["worker.args"]
    worker_args += [line.strip() for line in args_file.splitlines()
                    if line.strip() and not line.strip().startswith("#")]
    for argument in worker_args:
        expect(flag_name(argument) in worker_flags, f"dcp_worker has no flag {argument}")


def check_overlay_consistency(overlay, objects, planner_flags, worker_flags):
    """The rendered objects of one overlay fit together; returns their
    RenderedOverlay for the later checks."""
    problems = []

    def expect(condition, message):
        if not condition:
            problems.append(message)

    rendered = RenderedOverlay(overlay, objects)
    for part in (expect_images_and_selectors, expect_planner_exposure, expect_worker_discovery,
                 expect_cluster_fits_job, expect_planner_fits_pod, expect_mounted_files):
        part(rendered, expect)
    expect_known_flags(rendered, planner_flags, worker_flags, expect)
    check(f"{overlay}: rendered objects fit together", not problems, "; ".join(problems))
    return rendered


def check_overlay_planner_starts(o, secret_files):
    """The overlay's planner (`o`: its RenderedOverlay) starts with its
    rendered arguments and config."""
    directory = os.path.join(TMP, f"{o.name}-planner-start")
    mounts = materialize_volumes(o.planner_pod, o.planner, o.objects, directory, secret_files)
    planner = Planner(planner_argv(o.deployment, mounts), os.path.join(directory, "planner.log"))
    try:
        ports = planner.wait_serving(time.monotonic() + 30)
        code = stop(planner.process)
        check(f"{o.name}: dcp_planner serves with the rendered arguments (ports {ports}), exits 0 on SIGTERM",
              code == 0, f"exit code {code}")
    except (RuntimeError, TimeoutError) as error:
        check(f"{o.name}: dcp_planner serves with the rendered arguments", False, str(error))
    finally:
        stop(planner.process)


def monitor_problems(monitor, endpoints_field, target, whose, ports):
    """What is wrong with a Prometheus operator ServiceMonitor or PodMonitor
    (`monitor`, named dcp-planner or dcp-worker): its selector must pick
    `target`'s labels (`whose` labels, in the message), its jobLabel must give
    job=<its name>, and it must scrape exactly `ports`."""
    kind, job, spec = monitor["kind"], monitor["metadata"]["name"], monitor["spec"]
    labels = target["metadata"]["labels"]
    problems = []
    if not matches(spec["selector"]["matchLabels"], labels):
        problems.append(f"{kind} selector does not match {whose} labels")
    if labels.get(spec["jobLabel"]) != job:
        problems.append(f"{kind} jobLabel does not give job={job}")
    if {e["port"] for e in spec[endpoints_field]} != ports:
        problems.append(f"{kind} must scrape {', '.join(sorted(ports))}")
    return problems


def check_monitoring(rendered):
    objects = rendered.get("monitoring", [])
    problems = []
    with open(os.path.join(DEPLOY, "monitoring/prometheus/rules/dcp.rules.yml")) as f:
        rules = yaml.safe_load(f)
    try:
        rule = find(objects, "PrometheusRule", "dcp")
        if rule["spec"]["groups"] != rules["groups"]:
            problems.append("prometheusrule.yaml differs from prometheus/rules/dcp.rules.yml "
                            "(regenerate it: see its header)")
        overlay = rendered.get(LIVE_OVERLAY, [])
        planner_service = find(overlay, "Service", "dcp-planner")
        worker_pod = find(overlay, "Job", "dcp-worker")["spec"]["template"]
        service_monitor = find(objects, "ServiceMonitor", "dcp-planner")
        problems += monitor_problems(service_monitor, "endpoints", planner_service,
                                     "the planner Service's", {"metrics"})
        pod_monitor = find(objects, "PodMonitor", "dcp-worker")
        problems += monitor_problems(pod_monitor, "podMetricsEndpoints", worker_pod,
                                     "the worker pods'",
                                     {f"metrics-{i}" for i in range(8)})
        for monitor in (service_monitor, pod_monitor, rule):
            if monitor["metadata"]["namespace"] != "dcp":
                problems.append(f"{monitor['kind']} is not in the namespace dcp")
        dashboard_map = find(objects, "ConfigMap", "dcp-grafana-dashboard")
        if dashboard_map["metadata"]["labels"].get("grafana_dashboard") != "1":
            problems.append("the dashboard ConfigMap lacks the label grafana_dashboard=1")
        with open(os.path.join(DEPLOY, "monitoring/grafana/dcp-dashboard.json")) as f:
            if json.loads(dashboard_map["data"]["dcp-dashboard.json"]) != json.load(f):
                problems.append("the dashboard ConfigMap differs from grafana/dcp-dashboard.json")
    except (AssertionError, KeyError) as error:
        problems.append(f"{type(error).__name__}: {error}")
    check("monitoring: PrometheusRule, ServiceMonitor, PodMonitor and dashboard ConfigMap fit the job",
          not problems, "; ".join(problems))
    return rules


def dashboard_queries():
    with open(os.path.join(DEPLOY, "monitoring/grafana/dcp-dashboard.json")) as f:
        dashboard = json.load(f)
    problems = []
    queries = []
    ids = set()
    for panel in dashboard["panels"]:
        if panel["id"] in ids:
            problems.append(f"duplicate panel id {panel['id']}")
        ids.add(panel["id"])
        grid = panel["gridPos"]
        if grid["x"] + grid["w"] > 24:
            problems.append(f"panel {panel['title']} is wider than the dashboard")
        if panel["type"] in ("row", "text"):
            continue
        if panel.get("datasource", {}).get("uid") != "${datasource}":
            problems.append(f"panel {panel['title']} does not use the $datasource variable")
        if not panel.get("targets"):
            problems.append(f"panel {panel['title']} has no query")
        for target in panel.get("targets", []):
            queries.append((panel["title"], target["refId"], target["expr"]))
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    if set(variables) != {"datasource", "namespace"}:
        problems.append(f"variables {sorted(variables)}")
    check(f"grafana dashboard: {len(dashboard['panels'])} panels, {len(queries)} queries, well-formed",
          not problems, "; ".join(problems))
    namespace_query = variables["namespace"]["query"]["query"]
    return queries, namespace_query


def check_promtool(rendered):
    rules_dir = os.path.join(DEPLOY, "monitoring/prometheus/rules")
    result = run([PROMTOOL, "check", "rules", "dcp.rules.yml"], cwd=rules_dir)
    check("promtool check rules dcp.rules.yml", result.returncode == 0, result.stdout + result.stderr)
    result = run([PROMTOOL, "test", "rules", "dcp.rules.test.yml"], cwd=rules_dir)
    check("promtool test rules dcp.rules.test.yml (alerts and recordings on synthetic series)",
          result.returncode == 0, tail(result.stdout + result.stderr))
    prometheus_dir = os.path.join(DEPLOY, "monitoring/prometheus")
    result = run([PROMTOOL, "check", "config", "prometheus-loopback.yml"], cwd=prometheus_dir)
    check("promtool check config prometheus-loopback.yml", result.returncode == 0, result.stdout + result.stderr)
    # Debian's Prometheus is built without Kubernetes service discovery:
    # check the rest of prometheus.yml with the discovery swapped for files
    # (the relabelling is then exercised live, see check_kubernetes_relabelling).
    with open(os.path.join(prometheus_dir, "prometheus.yml")) as f:
        config = yaml.safe_load(f)
    swapped = 0
    for job in config["scrape_configs"]:
        if job.pop("kubernetes_sd_configs", None) is not None:
            job["file_sd_configs"] = [{"files": [f"targets/{job['job_name']}.json"]}]
            swapped += 1
    path = os.path.join(prometheus_dir, "prometheus.k8s-swapped.yml")
    with open(path, "w") as f:
        yaml.safe_dump(config, f)
    result = run([PROMTOOL, "check", "config", path], cwd=prometheus_dir)
    check(f"promtool check config prometheus.yml ({swapped} kubernetes_sd_configs swapped for file_sd)",
          result.returncode == 0 and swapped == 2, result.stdout + result.stderr)
    os.remove(path)


# --- Docker images -------------------------------------------------------------------


def needed_packages(binary, wheel_libraries=None):
    """Debian packages of the libraries `binary` links directly. Libraries of
    the torch wheel (.../site-packages/torch/lib/, which the image copies) go
    into `wheel_libraries` when given, as their folders."""
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run(["readelf", "-d", binary]).stdout)
    resolved = dict(re.findall(r"^\s*(\S+) => (\S+)", run(["ldd", binary]).stdout, re.M))
    packages = set()
    for library in needed:
        path = resolved.get(library)
        if not path:
            raise AssertionError(f"{binary}: ldd cannot resolve {library}")
        if wheel_libraries is not None and "/site-packages/torch/lib/" in os.path.realpath(path):
            wheel_libraries.add(os.path.dirname(os.path.realpath(path)))
            continue
        for candidate in (os.path.realpath(path), path, "/usr" + os.path.realpath(path)):
            result = run(["dpkg", "-S", candidate])
            if result.returncode == 0:
                packages.add(result.stdout.split(":", 1)[0])
                break
        else:
            raise AssertionError(f"{binary}: no Debian package holds {path}")
    # In every Debian image (Essential or Priority: required).
    return packages - {"libc6", "libgcc-s1", "libstdc++6"}


def dockerfile_runtime_packages(path):
    """Packages `apt-get install`ed in the Dockerfile's last stage."""
    with open(path) as f:
        text = f.read().replace("\\\n", " ")
    last_stage = re.split(r"^FROM ", text, flags=re.M)[-1]
    packages = set()
    for command in re.findall(r"apt-get install ([^&;]*)", last_stage):
        packages |= {w for w in command.split() if not w.startswith("-")}
    return packages


def dockerfile_copied_from_build(path):
    """Destinations of `COPY --from=build SOURCE DESTINATION` in the last stage."""
    with open(path) as f:
        text = f.read().replace("\\\n", " ")
    last_stage = re.split(r"^FROM ", text, flags=re.M)[-1]
    return set(re.findall(r"^COPY --from=build \S+\s+(\S+)$", last_stage, re.M))


def check_dockerfiles(rendered):
    docker = os.path.join(DEPLOY, "docker")
    for name, binary in (("planner", PLANNER_BINARY), ("worker", WORKER_BINARY)):
        try:
            wheel_libraries = set()
            needed = needed_packages(binary, wheel_libraries)
            dockerfile = os.path.join(docker, f"{name}.Dockerfile")
            listed = dockerfile_runtime_packages(dockerfile)
            missing = needed - listed
            extra = listed - needed - {"zlib1g"}
            check(f"{name}.Dockerfile runtime packages = packages of dcp_{name}'s libraries ({len(needed)})",
                  not missing and not extra, f"missing {sorted(missing)}, not needed {sorted(extra)}")
            # The torch wheel's libraries are copied to the path of the binary's
            # rpath, with the CUDA libraries from PyPI next to them.
            copied = dockerfile_copied_from_build(dockerfile)
            wanted = set()
            for folder in wheel_libraries:
                site_packages = os.path.dirname(os.path.dirname(folder))
                wanted |= {folder, os.path.join(site_packages, "nvidia")}
            if name == "worker":
                check(f"worker.Dockerfile copies the torch wheel's libraries dcp_worker links ({sorted(wheel_libraries)})",
                      wheel_libraries and wanted <= copied, f"copied {sorted(copied)}, needed {sorted(wanted)}")
        except AssertionError as error:
            check(f"{name}.Dockerfile runtime packages", False, str(error))
    with open(os.path.join(docker, "worker.Dockerfile")) as f:
        worker_dockerfile = f.read()
    job = find(rendered[LIVE_OVERLAY], "Job", "dcp-worker")
    command = job["spec"]["template"]["spec"]["containers"][0]["command"][0]
    entrypoint = re.search(r'^ENTRYPOINT \["([^"]+)"\]', worker_dockerfile, re.M).group(1)
    copied = re.search(r"^COPY .*deploy/docker/dcp-node-launcher.sh (\S+)$", worker_dockerfile, re.M)
    users = re.findall(r"^USER (\d+):(\d+)$", worker_dockerfile, re.M)
    run_as = job["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    check("worker.Dockerfile: the launcher is the Job's command and the ENTRYPOINT; non-root user",
          copied and copied.group(1) == command == entrypoint and users == [(str(run_as), str(run_as))],
          f"command {command}, entrypoint {entrypoint}, copied to {copied and copied.group(1)}, USER {users}")


