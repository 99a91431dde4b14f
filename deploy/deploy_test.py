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

import os
import secrets
import shutil
import sys
import time
import traceback

from deploy_support import (
    HADOLINT,
    KUBECTL,
    KUBERNETES_VALIDATE,
    OVERLAYS,
    PLANNER_BINARY,
    PROCESSES,
    PROMETHEUS,
    PROMTOOL,
    RESULTS,
    SHELLCHECK,
    TMP,
    WORKER_BINARY,
    YAMLLINT,
    check,
    help_flags,
    make_tls_files,
    stop,
    test_secret_files,
)

from deploy_static_checks import (
    check_dockerfiles,
    check_lint,
    check_manifests,
    check_monitoring,
    check_overlay_consistency,
    check_overlay_planner_starts,
    check_promtool,
    dashboard_queries,
)

from deploy_live_checks import (
    check_live,
)


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
        for overlay in OVERLAYS:
            if overlay in rendered:
                rendered_overlay = check_overlay_consistency(overlay, rendered[overlay], planner_flags,
                                                             worker_flags)
                check_overlay_planner_starts(rendered_overlay,
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
