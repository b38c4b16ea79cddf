"""The Kubernetes manifests (deploy/kubernetes): every object valid against the API's own schemas
(kubernetes-validate, strict: a misspelt or misplaced field fails), and the choices the design rests
on, checked as a reviewer would: the spool and its ingest sidecar, the drain, the probes, the
security context, the scaling. No cluster runs here: these are static checks of the files."""

import functools
import re
from pathlib import Path, PurePosixPath

import kubernetes_validate
import pytest
import yaml

REPOSITORY = Path(__file__).resolve().parents[2]
MANIFESTS = REPOSITORY / "deploy" / "kubernetes"
NOT_RESOURCES = ("kustomization.yaml", "secret.example.yaml")
# The oldest Kubernetes the manifests need (native sidecars: 1.29) and the newest with schemas here.
VERSIONS = ("1.29", kubernetes_validate.latest_version())
NAME_LABEL = {"app.kubernetes.io/name": "llm-gateway"}
WORKLOAD_KINDS = ("StatefulSet", "Deployment", "Job")
UID = 10001


# --- Reading the files -------------------------------------------------------------------------------


@functools.cache
def documents(filename: str) -> tuple[dict, ...]:
    text = (MANIFESTS / filename).read_text()
    return tuple(document for document in yaml.safe_load_all(text) if document)


def kustomization() -> dict:
    return documents("kustomization.yaml")[0]


def resources() -> list[str]:
    return kustomization()["resources"]


def objects() -> list[dict]:
    return [document for filename in resources() for document in documents(filename)]


def find(kind: str, name: str) -> dict:
    found = [o for o in objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def workloads() -> list[dict]:
    return [o for o in objects() if o["kind"] in WORKLOAD_KINDS]


def server() -> dict:
    return find("StatefulSet", "llm-gateway-server")


def pod_spec(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"]


def containers(pod: dict) -> list[dict]:
    return pod.get("initContainers", []) + pod["containers"]


def container(pod: dict, name: str) -> dict:
    (found,) = [c for c in containers(pod) if c["name"] == name]
    return found


def all_containers() -> list[tuple[str, dict, dict]]:
    """(workload/container, pod spec, container) for every container of every workload."""
    return [
        (f"{w['metadata']['name']}/{c['name']}", pod_spec(w), c)
        for w in workloads()
        for c in containers(pod_spec(w))
    ]


def named(where: str) -> tuple[dict, dict]:
    """The pod spec and the container named workload/container."""
    (found,) = [(pod, c) for name, pod, c in all_containers() if name == where]
    return found


def environment(c: dict) -> dict[str, str]:
    """What the container's process sees: its ConfigMaps (envFrom), then its own env, which wins."""
    env: dict[str, str] = {}
    for source in c.get("envFrom", []):
        env.update(find("ConfigMap", source["configMapRef"]["name"])["data"])
    env.update({variable["name"]: variable["value"] for variable in c.get("env", [])})
    return env


def mount_of(c: dict, path: str) -> dict:
    """The volume mount a path is on: the longest mountPath that contains it."""
    path_ = PurePosixPath(path)
    holding = [m for m in c.get("volumeMounts", []) if path_.is_relative_to(m["mountPath"])]
    assert holding, f"{c['name']}: {path} is on no volume (the root filesystem is read-only)"
    return max(holding, key=lambda m: len(PurePosixPath(m["mountPath"]).parts))


def volume(pod: dict, name: str) -> dict:
    (found,) = [v for v in pod.get("volumes", []) if v["name"] == name]
    return found


def port_number(c: dict, port: int | str) -> int:
    if isinstance(port, int):
        return port
    (found,) = [p["containerPort"] for p in c["ports"] if p["name"] == port]
    return found


def quantity(value: str) -> float:
    """A Kubernetes quantity as a number (the suffixes used here only)."""
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    match = re.fullmatch(r"([0-9.]+)(m|Ki|Mi|Gi)?", str(value))
    assert match, value
    return float(match.group(1)) * units.get(match.group(2) or "", 1)


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def label_selector_selects(selector: str, labels: dict) -> bool:
    """kubectl's `-l` selector (`k=v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`) on labels."""
    for requirement in re.split(r",(?![^()]*\))", selector):
        requirement = requirement.strip()
        if match := re.fullmatch(r"(\S+?)\s+(in|notin)\s*\(([^)]*)\)", requirement):
            key, operator, values = match.groups()
            inside = labels.get(key) in {value.strip() for value in values.split(",")}
            if inside != (operator == "in"):
                return False
        elif match := re.fullmatch(r"(\S+?)\s*(!=|==|=)\s*(\S+)", requirement):
            key, operator, value = match.groups()
            if (labels.get(key) == value) != (operator != "!="):
                return False
        elif requirement.startswith("!"):
            if requirement[1:].strip() in labels:
                return False
        elif requirement not in labels:
            return False
    return True


def source_constant(relative: str, name: str) -> str:
    """A module-level constant's literal, read from the repository's source (no Django set-up)."""
    text = (REPOSITORY / relative).read_text()
    match = re.search(rf"^{name}\s*=\s*(.+?)$", text, re.MULTILINE)
    assert match, f"{relative} defines no {name}"
    return match.group(1)


# --- The files and the schemas -----------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("filename", resources())
def test_every_listed_file_validates_strictly(filename, version):
    """Each file kustomize applies, document by document, against the API's schema: strict, so an
    unknown field (a typo, a field in the wrong place) fails here rather than in `kubectl apply`."""
    assert (MANIFESTS / filename).is_file(), f"{filename} is listed in kustomization.yaml but missing"
    assert documents(filename), f"{filename} holds no object"
    for document in documents(filename):
        try:
            kubernetes_validate.validate(document, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            where = ".".join(str(part) for part in error.path)
            name = f"{document['kind']}/{document['metadata']['name']}"
            pytest.fail(f"{filename}: {name}: {where}: {error.message}")


def test_no_manifest_is_forgotten():
    """A YAML file left out of kustomization.yaml would never be applied."""
    on_disk = {path.name for path in MANIFESTS.glob("*.yaml")} - set(NOT_RESOURCES)
    assert on_disk == set(resources())
    assert not set(NOT_RESOURCES) & set(resources()), "the secret example must never be applied"


def test_the_kustomization_needs_no_rendering():
    """Resources, labels and the image only: no patch or generator, so each file is what is applied
    (and what the tests above validated), and the image is overridable by kustomize."""
    allowed = {"apiVersion", "kind", "resources", "labels", "images"}
    assert set(kustomization()) <= allowed, set(kustomization()) - allowed
    assert kustomization()["labels"][0]["pairs"] == NAME_LABEL
    image_names = {image["name"] for image in kustomization()["images"]}
    for where, _, c in all_containers():
        assert c["image"].rsplit(":", 1)[0] in image_names, f"{where}: {c['image']} is not in images:"


def test_every_object_is_labelled_and_namespace_agnostic():
    """The namespace is the operator's choice (-n, an overlay); every object carries the app's label
    even without kustomize, so `kubectl get all -l app.kubernetes.io/name=llm-gateway` finds it."""
    for o in objects():
        assert "namespace" not in o["metadata"], o["metadata"]["name"]
        assert selects(NAME_LABEL, o["metadata"].get("labels", {})), o["metadata"]["name"]


def test_the_secret_example_is_a_valid_secret_that_holds_every_file_named():
    """The example validates as a Secret, is the one the pods mount, and has every key a *_FILE
    variable names (a missing file stops the gateway at start-up)."""
    (secret,) = documents("secret.example.yaml")
    for version in VERSIONS:
        kubernetes_validate.validate(secret, version, strict=True)
    assert secret["kind"] == "Secret"
    assert "kubectl create secret generic" in (MANIFESTS / "secret.example.yaml").read_text()
    for where, pod, c in all_containers():
        for name, value in environment(c).items():
            if name.endswith("_FILE"):
                mount = mount_of(c, value)
                assert volume(pod, mount["name"])["secret"]["secretName"] == secret["metadata"]["name"]
                key = str(PurePosixPath(value).relative_to(mount["mountPath"]))
                assert key in secret["stringData"], f"{where}: {name} names {key}, not in the Secret"


# --- The servers, their spool and its ingest ---------------------------------------------------------


def test_the_server_keeps_its_spool_on_a_volume_of_its_own():
    """A StatefulSet with a claim per pod, retained: a pod that dies (even with its node) comes back
    with its spool, and a scale-down never deletes entries not yet written to the database."""
    spec = server()["spec"]
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert "replicas" not in spec, "the HPA owns the count: a number here resets it at every apply"
    governing = find("Service", spec["serviceName"])
    assert governing["spec"]["clusterIP"] == "None"
    assert governing["spec"]["selector"] == spec["selector"]["matchLabels"]


def test_the_ingest_is_a_native_sidecar_on_the_servers_spool():
    """The ingest starts before the server and stops after it (an init container restarted Always),
    and reads the very directory the server writes: same claim, same path, same GATEWAY_OUTBOX_DIR."""
    pod = pod_spec(server())
    (ingest,) = pod["initContainers"]
    serving = container(pod, "server")
    assert ingest["args"] == ["ingest"] and ingest["restartPolicy"] == "Always"
    assert serving["args"] == ["server"]
    outbox = environment(serving)["GATEWAY_OUTBOX_DIR"]
    assert environment(ingest)["GATEWAY_OUTBOX_DIR"] == outbox
    assert mount_of(ingest, outbox) == mount_of(serving, outbox)
    (claim,) = server()["spec"]["volumeClaimTemplates"]
    assert mount_of(serving, outbox)["name"] == claim["metadata"]["name"]
    assert mount_of(serving, outbox)["mountPath"] == outbox, "the claim itself is the spool directory"


def test_the_drain_and_the_last_ingest_round_fit_in_the_grace_period():
    """SIGKILL must not come before the server's drain (GATEWAY_SHUTDOWN_GRACE_SECONDS), the time it
    then gives the requests it cuts (CUT_SECONDS, gateway_project/serve.py) and the sidecar's last
    round after it (10 s at least)."""
    pod = pod_spec(server())
    grace = float(environment(container(pod, "server"))["GATEWAY_SHUTDOWN_GRACE_SECONDS"])
    cut = float(source_constant("gateway_project/serve.py", "CUT_SECONDS"))
    assert pod["terminationGracePeriodSeconds"] >= grace + cut + 10
    assert "lifecycle" not in container(pod, "server"), "the drain is on SIGTERM; see the comment"


def test_the_probes_ask_the_right_questions_on_the_serving_port():
    """Readiness is /readyz (database, Redis, spool backlog); liveness and start-up are /healthz (no
    dependency: an outage must not restart every pod), on the port the server listens on, and
    patient enough not to kill a slow start or a busy process. Both paths are answered by the health
    app before Django (gateway_project/asgi.py): no Host needs to be in ALLOWED_HOSTS."""
    serving = container(pod_spec(server()), "server")
    env = environment(serving)
    probes = {kind: serving[kind] for kind in ("readinessProbe", "livenessProbe", "startupProbe")}
    assert probes["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert probes["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert probes["startupProbe"]["httpGet"]["path"] == "/healthz"
    answered_before_django = re.findall(r'"([^"]+)"', source_constant("gateway_project/health.py", "PROBES"))
    for kind, probe in probes.items():
        assert port_number(serving, probe["httpGet"]["port"]) == int(env["PORT"]) == 8000, kind
        assert probe["httpGet"]["path"] in answered_before_django, f"{kind}: Django would check its Host"
    startup, liveness = probes["startupProbe"], probes["livenessProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 30, "Django starts in ~5-10 s"
    assert liveness["failureThreshold"] >= 3
    assert liveness["periodSeconds"] * liveness["failureThreshold"] >= 30


def test_one_server_process_per_pod_and_no_cpu_limit_in_its_pod():
    """Scale with pods: one process a pod requesting the one core it can saturate; no CPU limit in
    the pod (CFS throttling stalls the event loop: latency spikes)."""
    pod = pod_spec(server())
    serving = container(pod, "server")
    assert environment(serving)["WEB_CONCURRENCY"] == "1"
    assert serving["resources"]["requests"] == {"cpu": "1", "memory": "512Mi", "ephemeral-storage": "1Gi"}
    assert serving["resources"]["limits"] == {"memory": "1Gi"}
    for c in containers(pod):
        assert "cpu" not in c["resources"].get("limits", {}), c["name"]


def test_the_servers_tmp_holds_a_dozen_big_bodies():
    """Twisted writes request bodies of 100 KB or more (and chunked ones) to temporary files in /tmp:
    a dozen bodies of GATEWAY_MAX_BODY_BYTES (20 MiB by default) at once must not get the pod evicted
    for exceeding its /tmp emptyDir, and the pod requests that room from the node."""
    pod = pod_spec(server())
    serving = container(pod, "server")
    tmp = volume(pod, mount_of(serving, "/tmp")["name"])["emptyDir"]
    assert quantity(tmp["sizeLimit"]) >= 12 * 20 * 2**20
    assert quantity(serving["resources"]["requests"]["ephemeral-storage"]) >= quantity(tmp["sizeLimit"])


def test_the_service_reaches_the_servers_on_port_80():
    """Port 80 named http to the container's 8000, selecting exactly the server pods."""
    service = find("Service", "llm-gateway")
    (port,) = service["spec"]["ports"]
    assert service["spec"].get("type", "ClusterIP") == "ClusterIP"
    assert (port["name"], port["port"]) == ("http", 80)
    assert port_number(container(pod_spec(server()), "server"), port["targetPort"]) == 8000
    assert service["spec"]["selector"] == server()["spec"]["selector"]["matchLabels"]


def test_the_disruption_budget_and_the_autoscaler_govern_the_servers():
    """Drains take one server at a time; the HPA scales the StatefulSet on the server's CPU, 2 to
    10, and scales down only after a stabilization window (each pod removed drains)."""
    labels = server()["spec"]["template"]["metadata"]["labels"]
    pdb = find("PodDisruptionBudget", "llm-gateway-server")
    assert selects(pdb["spec"]["selector"]["matchLabels"], labels)
    assert pdb["spec"].get("maxUnavailable") == 1 or pdb["spec"].get("minAvailable") == 1
    hpa = find("HorizontalPodAutoscaler", "llm-gateway-server")["spec"]
    target = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": server()["metadata"]["name"]}
    assert hpa["scaleTargetRef"] == target
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 10)
    (metric,) = hpa["metrics"]
    cpu = metric.get("containerResource") or metric["resource"]
    assert cpu["name"] == "cpu" and cpu.get("container", "server") == "server"
    assert cpu["target"] == {"type": "Utilization", "averageUtilization": 70}
    assert hpa["behavior"]["scaleDown"]["stabilizationWindowSeconds"] > 0


# --- The other roles ---------------------------------------------------------------------------------


def test_exactly_one_beat_never_two_during_a_rollout():
    """Celery beat must run once: one replica, and Recreate stops the old before the new starts."""
    beat = find("Deployment", "llm-gateway-beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}
    assert container(pod_spec(beat), "beat")["args"] == ["beat"]


def test_the_workers_and_the_migrations():
    """Two workers; migrate as a Job that retries a few times and cleans itself up."""
    worker = find("Deployment", "llm-gateway-worker")
    assert worker["spec"]["replicas"] == 2
    assert container(pod_spec(worker), "worker")["args"] == ["worker"]
    job = find("Job", "llm-gateway-migrate")["spec"]
    assert job["template"]["spec"]["containers"][0]["args"] == ["migrate"]
    assert job["template"]["spec"]["restartPolicy"] == "Never"
    assert 0 < job["backoffLimit"] <= 6 and job["ttlSecondsAfterFinished"] > 0


def test_the_first_install_applies_what_the_migrate_job_needs():
    """Step 3 of README.md (and migrate-job.yaml's header) applies the Job alone with its needs, by
    label: the ServiceAccount its pod runs as and the ConfigMaps it reads must be selected too (else
    the pod is refused and `kubectl wait` times out), and no server, worker or beat (the release
    rolls out only after the migrations)."""
    command = r"kubectl (?:-n \$NS )?apply -k deploy/kubernetes -l '([^']+)'"
    found = {
        filename: re.findall(command, (MANIFESTS / filename).read_text())
        for filename in ("README.md", "migrate-job.yaml")
    }
    assert all(len(selectors) == 1 for selectors in found.values()), found
    ((selector,),) = set(map(tuple, found.values()))
    job = find("Job", "llm-gateway-migrate")
    pod = pod_spec(job)
    needed = [job, find("ServiceAccount", pod["serviceAccountName"])]
    needed += [find("ConfigMap", s["configMapRef"]["name"]) for c in containers(pod) for s in c["envFrom"]]
    for o in needed:
        assert label_selector_selects(selector, o["metadata"]["labels"]), f"{o['kind']} not applied"
    for o in workloads():
        if o is not job:
            assert not label_selector_selects(selector, o["metadata"]["labels"]), o["metadata"]["name"]


@pytest.mark.parametrize(
    ("name", "cpu", "memory"),
    [
        ("llm-gateway-server/ingest", "100m", "192Mi"),
        ("llm-gateway-worker/worker", "250m", "384Mi"),
        ("llm-gateway-beat/beat", "50m", "256Mi"),
    ],
)
def test_the_measured_requests(name, cpu, memory):
    """Requests from what the processes were measured to use (a worker pod: a prefork parent of
    ~120 MiB and two children of ~97 MiB RSS, mostly shared)."""
    _, c = named(name)
    assert c["resources"]["requests"] == {"cpu": cpu, "memory": memory}


@pytest.mark.parametrize("where", [where for where, _, _ in all_containers()])
def test_every_container_has_its_memory_bounded(where):
    """Every container requests CPU and memory (scheduling) and has a memory limit above its request."""
    _, c = named(where)
    requests, limits = c["resources"]["requests"], c["resources"]["limits"]
    assert {"cpu", "memory"} <= set(requests)
    assert quantity(limits["memory"]) >= quantity(requests["memory"])


# --- Security ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", [where for where, _, _ in all_containers()])
def test_every_container_runs_as_non_root_without_privilege(where):
    """uid 10001, no privilege escalation, no capability, read-only root, the runtime's seccomp
    profile; no Kubernetes API token. The container's setting wins over the pod's."""
    pod, c = named(where)
    effective = {**pod.get("securityContext", {}), **c.get("securityContext", {})}
    assert effective["runAsNonRoot"] is True and effective["runAsUser"] == UID
    assert effective["allowPrivilegeEscalation"] is False
    assert effective.get("privileged", False) is False
    assert effective["readOnlyRootFilesystem"] is True
    assert effective["capabilities"]["drop"] == ["ALL"] and not effective["capabilities"].get("add")
    assert effective["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    assert find("ServiceAccount", pod["serviceAccountName"])["automountServiceAccountToken"] is False


@pytest.mark.parametrize("where", [where for where, _, _ in all_containers()])
def test_every_writable_path_is_a_volume(where):
    """The image needs /var/lib/gateway and /tmp writable (its root filesystem is read-only here),
    and the secrets are mounted read-only."""
    _, c = named(where)
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert {"/var/lib/gateway", "/tmp"} <= set(mounts)
    for mount in mounts.values():
        if mount["mountPath"].startswith("/run/secrets"):
            assert mount["readOnly"] is True


def test_the_metrics_dir_is_each_containers_own_scratch():
    """prometheus-client's multiprocess files sum whatever is in the directory: it must be an
    emptyDir of this container alone, never a claim (persistent) nor a volume another one mounts."""
    claims = {t["metadata"]["name"] for t in server()["spec"]["volumeClaimTemplates"]}
    for where, pod, c in all_containers():
        mount = mount_of(c, environment(c)["GATEWAY_METRICS_DIR"])
        assert mount["name"] not in claims, where
        assert "emptyDir" in volume(pod, mount["name"]), where
        sharing = [
            o["name"] for o in containers(pod) if mount["name"] in [m["name"] for m in o["volumeMounts"]]
        ]
        assert sharing == [c["name"]], f"{where}: its metrics volume is shared with {sharing}"
