"""Shared pieces of //deploy:deploy_test: where things are, the tools, reporting,
processes, rendering, PromQL helpers and test stand-ins for pods (their mounts,
arguments and a dcp_planner process)."""

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
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
    """A dcp_planner process and the ports it writes to its --port-file."""

    def __init__(self, argv, log_path, env=None):
        self.log = open(log_path, "w")
        self.port_file = log_path + ".ports"
        if os.path.exists(self.port_file):
            os.remove(self.port_file)
        self.process = start(argv + [f"--port-file={self.port_file}"], stdout=subprocess.DEVNULL,
                             stderr=self.log, text=True, env=env)
        # (gRPC port, metrics port), set by wait_serving.
        self.ports = None

    def _ports(self):
        """(gRPC port, metrics port) once the port file exists, else None."""
        try:
            with open(self.port_file) as f:
                fields = dict(line.strip().split("=", 1) for line in f if "=" in line)
        except FileNotFoundError:
            return None
        return int(fields["grpc_port"]), int(fields["metrics_port"])

    def wait_serving(self, deadline):
        def serving():
            if self.process.poll() is not None:
                raise RuntimeError(f"dcp_planner exited with {self.process.returncode}: "
                                   f"{tail(open(self.log.name).read())}")
            self.ports = self._ports()
            return self.ports
        return wait_for(f"dcp_planner's port file {self.port_file}", serving, deadline)


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

