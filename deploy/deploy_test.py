"""//deploy:deploy_test: checks deploy/ with the real tools and a real job.

Static checks:
  - yamllint (deploy/.yamllint.yaml, strict) on every YAML file, shellcheck on
    the shell scripts, hadolint on the Dockerfiles;
  - every kustomization (base, overlays cpu-demo and h200, monitoring) rendered
    with `kubectl kustomize` and validated with kubernetes-validate --strict
    against the Kubernetes 1.31 and 1.37 schemas; the example Secrets too;
  - the rendered objects fit together (selectors, ports, the planner address,
    the headless Service, cluster.json vs the worker Job, Secrets, flags that
    dcp_planner / dcp_worker --help know) and each overlay's planner starts
    with its rendered arguments and configuration (TLS with test certificates);
  - promtool check rules / test rules / check config; the PrometheusRule holds
    the same rules as the rules file; the Grafana dashboard's structure;
  - the Dockerfiles' runtime packages are exactly the Debian packages of the
    libraries the built binaries link (readelf -d, dpkg -S).

Live check: the cpu-demo overlay's planner and worker pods run on 127.0.0.1
(their rendered arguments and environment, paths and addresses mapped to the
test's folders and loopback; each worker "pod" is dcp-node-launcher with two
dcp_worker ranks), Debian's Prometheus scrapes them with
prometheus-loopback.yml, and then:
  - every metric name the rules and the dashboard use is one the binaries
    export, read from live scrapes of their /metrics;
  - every PromQL expression of the rules (alerts with their comparison made
    `bool`) and of the dashboard returns data from the HTTP API, and every
    rule evaluates without error;
  - prometheus.yml's Kubernetes relabelling, applied by the same Prometheus to
    the targets Kubernetes service discovery would produce for the rendered
    pods of both overlays, keeps exactly one target per planner and per rank;
  - SIGTERM stops the workers at a step boundary (launcher exit 143) and the
    planner (exit 0).

Every wait has a deadline; every process started is stopped at the end.
"""

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
import urllib.request

import yaml

# --- Locations -----------------------------------------------------------------

TOOLS_DIR = os.environ.get("DCP_DEPLOY_TOOLS", "/opt/dcp/deploy-tools")
KUBERNETES_VERSIONS = ["1.31.0", "1.37.0"]
OVERLAYS = ["cpu-demo", "h200"]
# The live job: the cpu-demo overlay.
LIVE_OVERLAY = "cpu-demo"
# Whole-test budget for the live part (Bazel's timeout is the hard limit).
LIVE_DEADLINE_SECONDS = 150
# Steps every rank must have reported before the queries.
LIVE_MIN_STEPS = 3


def runfiles_root():
    for variable in ("TEST_SRCDIR", "RUNFILES_DIR"):
        value = os.environ.get(variable)
        if value and os.path.isdir(os.path.join(value, "dcp")):
            return os.path.join(value, "dcp")
    # Run by hand from the repository root.
    return os.getcwd()


ROOT = runfiles_root()
TMP = tempfile.mkdtemp(prefix="deploy_test.", dir=os.environ.get("TEST_TMPDIR"))
# A real copy of deploy/ (kustomize refuses files that resolve outside the
# kustomization root, and runfiles are links).
DEPLOY = os.path.join(TMP, "deploy")
shutil.copytree(os.path.join(ROOT, "deploy"), DEPLOY, symlinks=False)
PLANNER_BINARY = os.path.join(ROOT, "planner/service/dcp_planner")
WORKER_BINARY = os.path.join(ROOT, "worker/dcp_worker")
LAUNCHER = os.path.join(DEPLOY, "docker/dcp-node-launcher.sh")


def tool(name, *candidates):
    for path in candidates:
        if os.access(path, os.X_OK):
            return path
    found = shutil.which(name)
    if found:
        return found
    raise SystemExit(
        f"deploy_test: {name} not found (looked in {', '.join(candidates)} and PATH); "
        "run scripts/install_deps.sh, which installs the deploy tools")


KUBECTL = tool("kubectl", f"{TOOLS_DIR}/bin/kubectl")
KUBERNETES_VALIDATE = tool("kubernetes-validate", f"{TOOLS_DIR}/bin/kubernetes-validate")
HADOLINT = tool("hadolint", f"{TOOLS_DIR}/bin/hadolint")
PROMETHEUS = tool("prometheus", "/usr/bin/prometheus")
PROMTOOL = tool("promtool", "/usr/bin/promtool")
YAMLLINT = tool("yamllint", "/usr/bin/yamllint")
SHELLCHECK = tool("shellcheck", "/usr/bin/shellcheck")
OPENSSL = tool("openssl", "/usr/bin/openssl")

# --- Reporting -------------------------------------------------------------------

RESULTS = []  # (name, ok, detail)


def check(name, ok, detail=""):
    RESULTS.append((name, bool(ok), detail))
    print(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {detail}" if detail and not ok else ""), flush=True)
    return ok


def run(argv, cwd=None, timeout=120, env=None):
    return subprocess.run(argv, cwd=cwd, timeout=timeout, env=env, capture_output=True, text=True)


def tail(text, lines=30):
    return "\n".join(text.strip().splitlines()[-lines:])


# --- Processes -------------------------------------------------------------------

PROCESSES = []  # every Popen started, stopped at the end


def start(argv, **kwargs):
    process = subprocess.Popen(argv, start_new_session=True, **kwargs)
    PROCESSES.append(process)
    return process


def stop(process, grace_seconds=15):
    """SIGTERM to the process's group, SIGKILL after the grace period; its code."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout=grace_seconds)
        except subprocess.TimeoutExpired:
            pass
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=10)
    # Leftovers of its group (ranks of a launcher) die with it.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return process.returncode


def wait_for(what, condition, deadline, interval=0.2):
    """Polls condition() until it returns a true value or the deadline passes."""
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(interval)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


# --- Rendering -------------------------------------------------------------------


def render(kustomization_dir):
    result = run([KUBECTL, "kustomize", kustomization_dir])
    if result.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {kustomization_dir}:\n{result.stderr}")
    return result.stdout


def objects_of(text):
    return [o for o in yaml.safe_load_all(text) if o]


def find(objects, kind, name_prefix):
    """The one object of `kind` whose name is `name_prefix` (or that plus a hash)."""
    found = [o for o in objects if o["kind"] == kind and
             re.fullmatch(re.escape(name_prefix) + r"(-[a-z0-9]{10})?", o["metadata"]["name"])]
    if len(found) != 1:
        raise AssertionError(f"expected one {kind} {name_prefix}, found {len(found)}")
    return found[0]


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def flag_name(argument):
    return argument[2:].split("=", 1)[0] if argument.startswith("--") else None


def help_flags(binary):
    result = run([binary, "--help"], timeout=30)
    return set(re.findall(r"^\s+--([a-z0-9-]+)", result.stdout, re.M))


# --- PromQL helpers ----------------------------------------------------------------

PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool",
                   "and", "or", "unless", "offset", "inf", "nan"}


def metric_names(expr):
    """Metric (and recorded series) names an expression selects."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        token = match.group(0)
        before = text[match.start() - 1] if match.start() > 0 else " "
        if before.isdigit() or before == ".":
            continue  # 1e3, durations
        if text[match.end():].lstrip().startswith("("):
            continue  # a function or an aggregation
        if token.lower() in PROMQL_KEYWORDS:
            continue
        names.add(token)
    return names


def with_bool(expr):
    """`expr` with its top-level comparison made `bool`, so that it returns
    0 or 1 for every series its two sides match (data whether or not the
    alert would fire)."""
    depth = 0
    quote = False
    i = 0
    while i < len(expr):
        c = expr[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == '"':
                quote = False
        elif c == '"':
            quote = True
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0:
            for op in (">=", "<=", "==", "!=", ">", "<"):
                if expr.startswith(op, i) and not (op in ("<", ">") and expr[i + 1:i + 2] == "="):
                    return expr[:i + len(op)] + " bool" + expr[i + len(op):]
        i += 1
    raise AssertionError(f"no top-level comparison in alert expression: {expr}")


def parse_exposition(text):
    """Sample names in a Prometheus text exposition."""
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", line).group(0))
    return names


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


def check_overlay_consistency(overlay, objects, planner_flags, worker_flags):
    """The rendered objects of one overlay fit together; returns facts for later."""
    problems = []

    def expect(condition, message):
        if not condition:
            problems.append(message)

    deployment = find(objects, "Deployment", "dcp-planner")
    job = find(objects, "Job", "dcp-worker")
    planner_service = find(objects, "Service", "dcp-planner")
    worker_service = find(objects, "Service", "dcp-workers")
    planner_policy = find(objects, "NetworkPolicy", "dcp-planner")
    worker_policy = find(objects, "NetworkPolicy", "dcp-worker")
    find(objects, "PersistentVolumeClaim", "dcp-planner-state")
    find(objects, "Namespace", "dcp")

    planner_pod = deployment["spec"]["template"]
    worker_pod = job["spec"]["template"]
    planner_labels = planner_pod["metadata"]["labels"]
    worker_labels = worker_pod["metadata"]["labels"]
    planner = planner_pod["spec"]["containers"][0]
    worker = worker_pod["spec"]["containers"][0]
    planner_ports = {p["name"]: p["containerPort"] for p in planner["ports"]}
    worker_ports = {p["name"]: p["containerPort"] for p in worker["ports"]}
    worker_env = {e["name"]: e.get("value") for e in worker.get("env", [])}

    # Images come from the overlay.
    for container in (planner, worker):
        expect("/" in container["image"] and ":" in container["image"],
               f"image {container['image']} is not set by the overlay")

    # Selectors.
    expect(matches(deployment["spec"]["selector"]["matchLabels"], planner_labels), "Deployment selector")
    expect(matches(planner_service["spec"]["selector"], planner_labels), "planner Service selector")
    expect(matches(worker_service["spec"]["selector"], worker_labels), "workers Service selector")
    expect(matches(planner_policy["spec"]["podSelector"]["matchLabels"], planner_labels),
           "planner NetworkPolicy podSelector")
    expect(matches(worker_policy["spec"]["podSelector"]["matchLabels"], worker_labels),
           "worker NetworkPolicy podSelector")

    # The planner's Service and NetworkPolicy expose exactly its two ports.
    service_ports = {p["name"]: p for p in planner_service["spec"]["ports"]}
    expect(set(service_ports) == {"grpc", "metrics"}, f"planner Service ports {sorted(service_ports)}")
    for name, port in service_ports.items():
        target = port["targetPort"]
        expect(planner_ports.get(target, target) == planner_ports.get(name), f"Service port {name} target")
    allowed = {}
    for rule in planner_policy["spec"]["ingress"]:
        for peer in rule["from"]:
            for port in rule["ports"]:
                allowed.setdefault(port["port"], []).append(peer)
    expect(set(allowed) == {planner_ports["grpc"], planner_ports["metrics"]},
           f"planner NetworkPolicy ports {sorted(allowed)}")
    expect(all(matches(p["podSelector"]["matchLabels"], worker_labels) and "namespaceSelector" not in p
               for p in allowed.get(planner_ports["grpc"], [])),
           "only the job's workers may reach the planner's gRPC port")
    expect(all("namespaceSelector" in p for p in allowed.get(planner_ports["metrics"], [])),
           "only Prometheus (another namespace) may reach the planner's metrics port")

    # The workers find the planner and each other.
    address = worker_env.get("DCP_PLANNER_ADDRESS", "")
    expect(address == f"{planner_service['metadata']['name']}:{service_ports['grpc']['port']}",
           f"DCP_PLANNER_ADDRESS={address}")
    expect(worker_service["spec"].get("clusterIP") == "None", "dcp-workers is not headless")
    expect(worker_service["spec"].get("publishNotReadyAddresses") is True, "publishNotReadyAddresses")
    expect(worker_pod["spec"].get("subdomain") == worker_service["metadata"]["name"], "Job subdomain")
    expect(worker_env.get("DCP_STORE_DOMAIN") == worker_service["metadata"]["name"], "DCP_STORE_DOMAIN")
    expect(job["spec"].get("completionMode") == "Indexed", "the worker Job is not Indexed")
    expect(worker_pod["spec"]["restartPolicy"] == "Never", "podFailurePolicy needs restartPolicy Never")

    # cluster.json matches the worker Job.
    config = find(objects, "ConfigMap", "dcp-planner-config")
    cluster = json.loads(config["data"]["cluster.json"])
    json.loads(config["data"]["model.json"])
    ranks = int(worker_env.get("DCP_RANKS_PER_NODE", "0"))
    expect(cluster["num_nodes"] == job["spec"]["completions"] == job["spec"]["parallelism"],
           f"num_nodes {cluster['num_nodes']} vs completions {job['spec']['completions']}")
    expect(cluster["gpus_per_node"] == ranks, f"gpus_per_node {cluster['gpus_per_node']} vs ranks {ranks}")
    metrics_base = int(worker_env["DCP_METRICS_PORT_BASE"])
    expected_metrics = {f"metrics-{i}": metrics_base + i for i in range(ranks)}
    actual_metrics = {k: v for k, v in worker_ports.items() if k.startswith("metrics-")}
    expect(actual_metrics == expected_metrics, f"worker metrics ports {actual_metrics}")
    expect(worker_ports.get("c10d-store") == int(worker_env["DCP_STORE_PORT_BASE"]), "c10d-store port")
    prometheus_ranges = [p for rule in worker_policy["spec"]["ingress"] for p in rule.get("ports", [])]
    expect(all(any(r["port"] <= port <= r.get("endPort", r["port"]) for r in prometheus_ranges)
               for port in expected_metrics.values()), "worker NetworkPolicy misses metrics ports")
    gpus = worker["resources"].get("limits", {}).get("nvidia.com/gpu")
    if overlay == "h200":
        expect(gpus == ranks == 8, f"h200: nvidia.com/gpu {gpus} for {ranks} ranks")
    else:
        expect(gpus is None, "cpu-demo asks for GPUs")

    # /dev/shm, termination grace.
    volumes = {v["name"]: v for v in worker_pod["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in worker["volumeMounts"]}
    shm = volumes.get(mounts.get("/dev/shm"), {}).get("emptyDir", {})
    expect(shm.get("medium") == "Memory" and shm.get("sizeLimit"), "/dev/shm is not a sized memory emptyDir")
    expect(worker_pod["spec"]["terminationGracePeriodSeconds"] >= 60, "worker termination grace < 60 s")

    # Probes: gRPC health on the gRPC port, or (TLS) TCP on it and GET /metrics.
    for probe_name in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = planner.get(probe_name)
        expect(probe is not None, f"planner {probe_name} missing")
        if not probe:
            continue
        if "grpc" in probe:
            expect(probe["grpc"]["port"] == planner_ports["grpc"], f"{probe_name} port")
            expect(not any(a.startswith("--tls-cert") for a in planner["args"]),
                   f"{probe_name}: grpc probes speak plaintext but the planner serves TLS")
        elif "tcpSocket" in probe:
            expect(probe["tcpSocket"]["port"] in ("grpc", planner_ports["grpc"]), f"{probe_name} port")
        else:
            expect(probe.get("httpGet", {}).get("port") in ("metrics", planner_ports["metrics"]),
                   f"{probe_name} port")

    # Volumes: ConfigMaps and Secrets exist and hold the files the flags name.
    keys = secret_keys()
    config_maps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    for pod, container in ((planner_pod, planner), (worker_pod, worker)):
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
        values += [v for v in worker_env.values() if v] if container is worker else []
        for value in values:
            for mount_path, names in files.items():
                if value.startswith(mount_path + "/"):
                    expect(value[len(mount_path) + 1:] in names, f"{value}: no such key in the volume")

    # Flags the binaries know.
    for argument in planner["args"]:
        expect(flag_name(argument) in planner_flags, f"dcp_planner has no flag {argument}")
    worker_args = list(worker.get("args", []))
    args_file = find(objects, "ConfigMap", "dcp-worker-config")["data"]["worker.args"]
    worker_args += [line.strip() for line in args_file.splitlines()
                    if line.strip() and not line.strip().startswith("#")]
    for argument in worker_args:
        expect(flag_name(argument) in worker_flags, f"dcp_worker has no flag {argument}")

    check(f"{overlay}: rendered objects fit together", not problems, "; ".join(problems))
    return {"deployment": deployment, "job": job, "objects": objects}


def remap(value, mounts):
    """A container path under a mount, mapped to the test's folder for it."""
    for mount_path, local in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
        if value == mount_path or value.startswith(mount_path + "/"):
            return local + value[len(mount_path):]
    return value


def materialize_volumes(pod, container, objects, directory, secret_files):
    """Test folders standing for the container's mounts: ConfigMap data,
    Secrets from `secret_files` (name -> {key: content}), empty folders for
    the rest. Returns {mountPath: folder}."""
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    config_maps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    mounts = {}
    for mount in container["volumeMounts"]:
        local = os.path.join(directory, mount["name"])
        os.makedirs(local, exist_ok=True)
        volume = volumes[mount["name"]]
        contents = {}
        if "configMap" in volume:
            contents = config_maps[volume["configMap"]["name"]]["data"]
        elif "secret" in volume:
            contents = secret_files[volume["secret"]["secretName"]]
        for key, text in contents.items():
            with open(os.path.join(local, key), "w") as f:
                f.write(text)
        mounts[mount["mountPath"]] = local
    return mounts


def planner_argv(deployment, mounts):
    """The rendered planner's arguments on loopback, paths mapped."""
    argv = [PLANNER_BINARY]
    for argument in deployment["spec"]["template"]["spec"]["containers"][0]["args"]:
        name = flag_name(argument)
        if name == "listen":
            argument = "--listen=127.0.0.1:0"
        elif name == "metrics-listen":
            argument = "--metrics-listen=127.0.0.1:0"
        elif "=" in argument:
            argument = f"--{name}={remap(argument.split('=', 1)[1], mounts)}"
        argv.append(argument)
    return argv


class Planner:
    """A dcp_planner process and its "listening on" line."""

    LINE = re.compile(r"dcp_planner listening on 127\.0\.0\.1:(\d+), metrics on 127\.0\.0\.1:(\d+)")

    def __init__(self, argv, log_path, env=None):
        self.log = open(log_path, "w")
        self.process = start(argv, stdout=subprocess.PIPE, stderr=self.log, text=True, env=env)
        self.ports = None
        self.lines = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append(line)
            match = self.LINE.search(line)
            if match and not self.ports:
                self.ports = (int(match.group(1)), int(match.group(2)))

    def wait_serving(self, deadline):
        def serving():
            if self.process.poll() is not None:
                raise RuntimeError(f"dcp_planner exited with {self.process.returncode}: "
                                   f"{tail(open(self.log.name).read())}")
            return self.ports
        return wait_for("dcp_planner's \"listening on\" line", serving, deadline)


def make_tls_files(directory):
    """A CA and a planner certificate (SAN dcp-planner, localhost, 127.0.0.1)."""
    os.makedirs(directory, exist_ok=True)

    def ssl(*args):
        result = run([OPENSSL] + list(args), cwd=directory)
        if result.returncode != 0:
            raise RuntimeError(f"openssl {' '.join(args)}: {result.stderr}")
    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=dcp-test-ca",
        "-keyout", "ca.key", "-out", "ca.crt")
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=dcp-planner", "-keyout", "tls.key", "-out",
        "tls.csr")
    with open(os.path.join(directory, "san.ext"), "w") as f:
        f.write("subjectAltName=DNS:dcp-planner,DNS:localhost,IP:127.0.0.1\n")
    ssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days",
        "1", "-extfile", "san.ext", "-out", "tls.crt")
    return {name: open(os.path.join(directory, name)).read() for name in ("ca.crt", "tls.crt", "tls.key")}


def test_secret_files(token, tls):
    return {"dcp-planner-token": {"token": token + "\n"},
            "dcp-planner-tls": {"tls.crt": tls["tls.crt"], "tls.key": tls["tls.key"]},
            "dcp-planner-ca": {"ca.crt": tls["ca.crt"]}}


def check_overlay_planner_starts(overlay, facts, secret_files):
    """The overlay's planner starts with its rendered arguments and config."""
    deployment = facts["deployment"]
    pod = deployment["spec"]["template"]
    directory = os.path.join(TMP, f"{overlay}-planner-start")
    mounts = materialize_volumes(pod, pod["spec"]["containers"][0], facts["objects"], directory,
                                 secret_files)
    planner = Planner(planner_argv(deployment, mounts), os.path.join(directory, "planner.log"))
    try:
        ports = planner.wait_serving(time.monotonic() + 30)
        code = stop(planner.process)
        check(f"{overlay}: dcp_planner serves with the rendered arguments (ports {ports}), exits 0 on SIGTERM",
              code == 0, f"exit code {code}")
    except (RuntimeError, TimeoutError) as error:
        check(f"{overlay}: dcp_planner serves with the rendered arguments", False, str(error))
    finally:
        stop(planner.process)


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
        spec = service_monitor["spec"]
        if not matches(spec["selector"]["matchLabels"], planner_service["metadata"]["labels"]):
            problems.append("ServiceMonitor selector does not match the planner Service's labels")
        if planner_service["metadata"]["labels"].get(spec["jobLabel"]) != "dcp-planner":
            problems.append("ServiceMonitor jobLabel does not give job=dcp-planner")
        if {e["port"] for e in spec["endpoints"]} != {"metrics"}:
            problems.append("ServiceMonitor endpoints")
        pod_monitor = find(objects, "PodMonitor", "dcp-worker")
        spec = pod_monitor["spec"]
        if not matches(spec["selector"]["matchLabels"], worker_pod["metadata"]["labels"]):
            problems.append("PodMonitor selector does not match the worker pods' labels")
        if worker_pod["metadata"]["labels"].get(spec["jobLabel"]) != "dcp-worker":
            problems.append("PodMonitor jobLabel does not give job=dcp-worker")
        if {e["port"] for e in spec["podMetricsEndpoints"]} != {f"metrics-{i}" for i in range(8)}:
            problems.append("PodMonitor must scrape metrics-0 ... metrics-7")
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


# --- Main ---------------------------------------------------------------------------------


def main():
    started = time.monotonic()
    print(f"deploy_test: tools: {KUBECTL}, {KUBERNETES_VALIDATE}, {HADOLINT}, {PROMETHEUS}, {PROMTOOL}, "
          f"{YAMLLINT}, {SHELLCHECK}; work folder {TMP}", flush=True)
    try:
        check_lint()
        rendered = check_manifests()
        planner_flags = help_flags(PLANNER_BINARY)
        worker_flags = help_flags(WORKER_BINARY)
        check("dcp_planner --help and dcp_worker --help list their flags",
              len(planner_flags) > 5 and len(worker_flags) > 5, f"{planner_flags} {worker_flags}")
        tls = make_tls_files(os.path.join(TMP, "tls"))
        facts = {}
        for overlay in OVERLAYS:
            if overlay in rendered:
                facts[overlay] = check_overlay_consistency(overlay, rendered[overlay], planner_flags,
                                                           worker_flags)
                check_overlay_planner_starts(overlay, facts[overlay],
                                             test_secret_files(secrets.token_hex(16), tls))
        check_promtool(rendered)
        rules = check_monitoring(rendered)
        dashboard, namespace_query = dashboard_queries()
        check_dockerfiles(rendered)
        if all(o in rendered for o in OVERLAYS):
            check_live(rendered, rules, dashboard, namespace_query)
        else:
            check("live job", False, "an overlay did not render")
    except Exception:  # noqa: BLE001 - any crash is a failed check, with its trace
        check("deploy_test ran to the end", False, traceback.format_exc())
    finally:
        for process in PROCESSES:
            stop(process, grace_seconds=5)
    failed = [name for name, ok, _ in RESULTS if not ok]
    print(f"\ndeploy_test: {len(RESULTS) - len(failed)} checks passed, {len(failed)} failed "
          f"in {time.monotonic() - started:.0f} s", flush=True)
    if not failed:
        shutil.rmtree(TMP, ignore_errors=True)
    else:
        print(f"deploy_test: logs and rendered files kept in {TMP}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
