package deploy

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The replicated variant (issue 17: "deploy/: the replicated variant now that both services are
// shared: the Kubernetes manifests for N replicas with the PostgreSQL URL from a Secret and a
// migrate Job"): kubernetes/historyd-replicated.yaml and kubernetes/historyd-migrate.yaml.

// manifest is the parsed documents of one file, by kind.
type manifest map[string]any

func readManifest(t *testing.T, file string) manifest {
	t.Helper()
	docs, err := parseYAML(readFile(t, file))
	if err != nil {
		t.Fatalf("parsing %s: %v", file, err)
	}
	m := manifest{}
	for _, d := range docs {
		kind, err := path(d, "kind")
		if err != nil {
			t.Fatalf("%s: a document without kind: %v", file, err)
		}
		if _, dup := m[kind.(string)]; dup {
			t.Fatalf("%s: two documents of kind %s", file, kind)
		}
		m[kind.(string)] = d
	}
	return m
}

// str reads the scalar at steps in doc, "" (and an error) when it is absent.
func str(t *testing.T, doc any, steps ...any) string {
	t.Helper()
	v, err := path(doc, steps...)
	if err != nil {
		t.Errorf("%v: %v", steps, err)
		return ""
	}
	s, _ := v.(string)
	return s
}

// has reports whether steps lead somewhere in doc.
func has(doc any, steps ...any) bool {
	_, err := path(doc, steps...)
	return err == nil
}

func at(base []any, steps ...any) []any { return append(slices.Clone(base), steps...) }

// envVar is one container environment entry: a value, or a Secret's key.
type envVar struct {
	value, secret, key string
	fromSecret         bool
}

// containerEnv reads a container's env list by name.
func containerEnv(t *testing.T, doc any, ctr []any) map[string]envVar {
	t.Helper()
	list, err := path(doc, at(ctr, "env")...)
	if err != nil {
		t.Fatalf("%v env: %v", ctr, err)
	}
	env := map[string]envVar{}
	for i := range list.([]any) {
		e := at(ctr, "env", i)
		name := str(t, doc, at(e, "name")...)
		var v envVar
		if has(doc, at(e, "valueFrom")...) {
			v = envVar{secret: str(t, doc, at(e, "valueFrom", "secretKeyRef", "name")...), key: str(t, doc, at(e, "valueFrom", "secretKeyRef", "key")...), fromSecret: true}
		} else {
			v.value = str(t, doc, at(e, "value")...)
		}
		if _, dup := env[name]; dup {
			t.Errorf("%v: %s set twice", ctr, name)
		}
		env[name] = v
	}
	return env
}

// checkHardened: the pod and its first container run as the image's non-root user with a
// read-only root filesystem, no capabilities, no privilege escalation, the runtime's seccomp
// profile and no service-account token, as the single-replica manifest does.
func checkHardened(t *testing.T, what string, doc any, pod []any) {
	t.Helper()
	ctr := at(pod, "containers", 0)
	for _, c := range []struct {
		steps []any
		want  string
	}{
		{at(pod, "securityContext", "runAsNonRoot"), "true"},
		{at(pod, "securityContext", "runAsUser"), "65532"},
		{at(pod, "securityContext", "seccompProfile", "type"), "RuntimeDefault"},
		{at(pod, "automountServiceAccountToken"), "false"},
		{at(ctr, "securityContext", "readOnlyRootFilesystem"), "true"},
		{at(ctr, "securityContext", "allowPrivilegeEscalation"), "false"},
		{at(ctr, "securityContext", "runAsNonRoot"), "true"},
		{at(ctr, "securityContext", "capabilities", "drop", 0), "ALL"},
		{at(ctr, "securityContext", "seccompProfile", "type"), "RuntimeDefault"},
	} {
		if got := str(t, doc, c.steps...); got != c.want {
			t.Errorf("%s %v = %q, want %q", what, c.steps, got, c.want)
		}
	}
	for _, kind := range []string{"requests", "limits"} {
		for _, res := range []string{"cpu", "memory"} {
			if str(t, doc, at(ctr, "resources", kind, res)...) == "" {
				t.Errorf("%s sets no %s %s", what, res, kind)
			}
		}
	}
}

// knownVariables are the HISTORYD_* variables historyd reads (cmd/historyd's sources).
func knownVariables(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	for _, f := range []string{"config_store.go", "config_serving.go", "config_history.go", "config_exchange.go", "config.go", "memlimit.go", "gc.go", "pprof.go"} {
		for _, m := range regexp.MustCompile(`"(HISTORYD_[A-Z_]+)"`).FindAllStringSubmatch(readFile(t, "../cmd/historyd/"+f), -1) {
			known[m[1]] = true
		}
	}
	if !known["HISTORYD_POSTGRES_URL"] || !known["HISTORYD_STORE"] {
		t.Fatal("cmd/historyd no longer names HISTORYD_STORE and HISTORYD_POSTGRES_URL where this test looks")
	}
	return known
}

// TestKubernetesReplicated: N replicas (at least 2) on --store postgres, the URL from a Secret
// (never a literal), rolled one at a time with none taken away first, no volume (nothing on disk),
// no migration at start (the Job does it), the pool within PostgreSQL's default max_connections,
// readiness on grpc.health.v1, hardened as the single replica is; a PodDisruptionBudget and a
// Service over the pods. The Job runs `historyd migrate --store postgres` with the same image and
// the same Secret key, hardened too.
func TestKubernetesReplicated(t *testing.T) {
	known := knownVariables(t)
	rep := readManifest(t, "kubernetes/historyd-replicated.yaml")
	dep, pdb, svc := rep["Deployment"], rep["PodDisruptionBudget"], rep["Service"]
	if dep == nil || pdb == nil || svc == nil || len(rep) != 3 {
		t.Fatalf("historyd-replicated.yaml: kinds %v, want one Deployment, one PodDisruptionBudget and one Service (no volume claim)", slices.Sorted(mapsKeys(rep)))
	}
	pod := []any{"spec", "template", "spec"}
	ctr := at(pod, "containers", 0)
	checkHardened(t, "Deployment", dep, pod)

	replicas, err := strconv.Atoi(str(t, dep, "spec", "replicas"))
	if err != nil || replicas < 2 {
		t.Errorf("replicas %q, want N >= 2", str(t, dep, "spec", "replicas"))
	}
	if s := str(t, dep, "spec", "strategy", "type"); s != "RollingUpdate" || str(t, dep, "spec", "strategy", "rollingUpdate", "maxUnavailable") != "0" {
		t.Errorf("strategy %q with maxUnavailable %q, want RollingUpdate with 0: the replicas share the database, so old and new may overlap", s, str(t, dep, "spec", "strategy", "rollingUpdate", "maxUnavailable"))
	}
	if str(t, dep, at(ctr, "readinessProbe", "grpc", "port")...) != "50051" {
		t.Error("the readiness probe is not grpc.health.v1 on 50051: a replica whose database is gone must leave the Service")
	}
	for _, p := range []string{"startupProbe", "livenessProbe"} {
		if !has(dep, at(ctr, p)...) {
			t.Errorf("no %s", p)
		}
	}

	env := containerEnv(t, dep, ctr)
	for name := range env {
		if !known[name] {
			t.Errorf("the Deployment sets %s, which historyd does not read", name)
		}
	}
	if env["HISTORYD_STORE"].value != "postgres" {
		t.Errorf("HISTORYD_STORE = %+v, want postgres", env["HISTORYD_STORE"])
	}
	url := env["HISTORYD_POSTGRES_URL"]
	if !url.fromSecret || url.secret == "" || url.key == "" {
		t.Errorf("HISTORYD_POSTGRES_URL = %+v, want it from a Secret's key", url)
	}
	if env["HISTORYD_AUTO_MIGRATE"].value != "false" {
		t.Errorf("HISTORYD_AUTO_MIGRATE = %+v, want false: the migrate Job changes the schema", env["HISTORYD_AUTO_MIGRATE"])
	}
	if env["HISTORYD_LISTEN"].value != "0.0.0.0:50051" {
		t.Errorf("HISTORYD_LISTEN = %+v, want 0.0.0.0:50051 (the probes' port, on every interface)", env["HISTORYD_LISTEN"])
	}
	if _, ok := env["HISTORYD_DATA_DIR"]; ok {
		t.Error("HISTORYD_DATA_DIR is set: the replicas keep nothing on disk")
	}
	// docs/operations.md#pool-sizing: replicas x (max conns + 1) + the migration's 1 < 100.
	conns, err := strconv.Atoi(env["HISTORYD_POSTGRES_MAX_CONNS"].value)
	if err != nil || replicas*(conns+1)+1 >= 100 {
		t.Errorf("%d replicas x (HISTORYD_POSTGRES_MAX_CONNS %q + 1) + 1 connections: want it set, and under PostgreSQL's default max_connections (100)", replicas, env["HISTORYD_POSTGRES_MAX_CONNS"].value)
	}
	grace, err := time.ParseDuration(env["HISTORYD_GRACE_PERIOD"].value)
	if err != nil {
		t.Fatalf("HISTORYD_GRACE_PERIOD: %v", err)
	}
	preStop, _ := strconv.Atoi(str(t, dep, at(ctr, "lifecycle", "preStop", "sleep", "seconds")...))
	if term, _ := strconv.Atoi(str(t, dep, at(pod, "terminationGracePeriodSeconds")...)); preStop <= 0 || time.Duration(term-preStop)*time.Second <= grace {
		t.Errorf("terminationGracePeriodSeconds %d and preStop %ds, want a drain sleep and room for the grace period %v after it", term, preStop, grace)
	}
	volumes, _ := path(dep, at(pod, "volumes")...)
	vs, _ := volumes.([]any)
	for i := range vs {
		if has(dep, at(pod, "volumes", i, "persistentVolumeClaim")...) || has(dep, at(pod, "volumes", i, "emptyDir")...) {
			t.Errorf("volume %q: the replicas keep nothing on disk", str(t, dep, at(pod, "volumes", i, "name")...))
		}
	}

	podLabels, _ := path(dep, "spec", "template", "metadata", "labels")
	for what, doc := range map[string]any{"Service": svc, "PodDisruptionBudget": pdb} {
		steps := []any{"spec", "selector"}
		if what == "PodDisruptionBudget" {
			steps = append(steps, "matchLabels")
		}
		selector, err := path(doc, steps...)
		if err != nil || len(selector.(map[string]any)) == 0 {
			t.Errorf("%s selects nothing (%v)", what, err)
			continue
		}
		for k, v := range selector.(map[string]any) {
			if podLabels.(map[string]any)[k] != v {
				t.Errorf("%s selects %s=%v, which the pods do not carry", what, k, v)
			}
		}
	}
	if str(t, pdb, "spec", "maxUnavailable") != "1" {
		t.Errorf("PodDisruptionBudget maxUnavailable %q, want 1", str(t, pdb, "spec", "maxUnavailable"))
	}
	if str(t, svc, "spec", "ports", 0, "targetPort") != "grpc" || str(t, dep, at(ctr, "ports", 0, "name")...) != "grpc" ||
		str(t, dep, at(ctr, "ports", 0, "containerPort")...) != "50051" {
		t.Error("the Service's first port does not reach the container's grpc port 50051")
	}

	mig := readManifest(t, "kubernetes/historyd-migrate.yaml")
	job := mig["Job"]
	if job == nil || len(mig) != 1 || str(t, job, "apiVersion") != "batch/v1" {
		t.Fatalf("historyd-migrate.yaml: kinds %v, want one batch/v1 Job", slices.Sorted(mapsKeys(mig)))
	}
	checkHardened(t, "Job", job, pod)
	var args []string
	list, _ := path(job, at(ctr, "args")...)
	for _, a := range list.([]any) {
		args = append(args, a.(string))
	}
	if !slices.Equal(args, []string{"migrate", "--store", "postgres"}) {
		t.Errorf("the Job runs %q, want `historyd migrate --store postgres` (the image's entrypoint is historyd)", args)
	}
	if usage := readFile(t, "../cmd/historyd/migrate.go"); !strings.Contains(usage, "historyd migrate --store postgres") {
		t.Error("historyd migrate's usage no longer shows `historyd migrate --store postgres`")
	}
	if ji, di := str(t, job, at(ctr, "image")...), str(t, dep, at(ctr, "image")...); ji != di {
		t.Errorf("the Job runs image %q, the replicas %q: the migration must be the new binary's", ji, di)
	}
	jenv := containerEnv(t, job, ctr)
	for name := range jenv {
		if !known[name] {
			t.Errorf("the Job sets %s, which historyd does not read", name)
		}
	}
	if j := jenv["HISTORYD_POSTGRES_URL"]; !j.fromSecret || j.secret != url.secret || j.key != url.key {
		t.Errorf("the Job's HISTORYD_POSTGRES_URL = %+v, want the replicas' Secret key %s/%s", j, url.secret, url.key)
	}
	if rp := str(t, job, at(pod, "restartPolicy")...); rp != "OnFailure" && rp != "Never" {
		t.Errorf("the Job's restartPolicy %q, want OnFailure or Never", rp)
	}
	if n, err := strconv.Atoi(str(t, job, "spec", "backoffLimit")); err != nil || n < 1 {
		t.Error("the Job has no backoffLimit >= 1: a database not reachable yet should be retried")
	}
}
