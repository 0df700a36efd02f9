package deploy

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// decodeStrict decodes one YAML document into the Kubernetes API type of
// its kind; an unknown field, a duplicate field or an unknown kind is an
// error.
func decodeStrict(doc []byte) (any, error) {
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return nil, err
	}
	var obj any
	switch meta.APIVersion + " " + meta.Kind {
	case "apps/v1 Deployment":
		obj = &appsv1.Deployment{}
	case "apps/v1 StatefulSet":
		obj = &appsv1.StatefulSet{}
	case "v1 Service":
		obj = &corev1.Service{}
	case "v1 Secret":
		obj = &corev1.Secret{}
	case "v1 ConfigMap":
		obj = &corev1.ConfigMap{}
	case "policy/v1 PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	case "networking.k8s.io/v1 NetworkPolicy":
		obj = &networkingv1.NetworkPolicy{}
	default:
		return nil, &unknownKindError{meta.APIVersion, meta.Kind}
	}
	return obj, yaml.UnmarshalStrict(doc, obj)
}

type unknownKindError struct{ apiVersion, kind string }

func (e *unknownKindError) Error() string {
	return "no API type for apiVersion " + e.apiVersion + " kind " + e.kind
}

// splitDocs splits a YAML stream on its "---" lines, dropping documents
// that hold only comments.
func splitDocs(b []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		if regexp.MustCompile(`(?m)^[^#\s]`).Match(cur.Bytes()) {
			docs = append(docs, bytes.Clone(cur.Bytes()))
		}
		cur.Reset()
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if strings.TrimRight(sc.Text(), " ") == "---" {
			flush()
			continue
		}
		cur.WriteString(sc.Text() + "\n")
	}
	flush()
	return docs
}

func TestDecodeStrictRefusesUnknownFields(t *testing.T) {
	_, err := decodeStrict([]byte("apiVersion: v1\nkind: Service\nspec:\n  clusterIP: None\n  publishNotReadyAdresses: true\n"))
	if err == nil || !strings.Contains(err.Error(), "publishNotReadyAdresses") {
		t.Errorf("misspelt field: %v", err)
	}
	if _, err := decodeStrict([]byte("apiVersion: v9\nkind: Pod\n")); err == nil {
		t.Error("unknown kind decoded")
	}
}

// podSpecs returns the pod templates of the workloads among objs.
func podSpecs(objs []any) map[string]corev1.PodSpec {
	specs := map[string]corev1.PodSpec{}
	for _, o := range objs {
		switch w := o.(type) {
		case *appsv1.Deployment:
			specs["Deployment "+w.Name] = w.Spec.Template.Spec
		case *appsv1.StatefulSet:
			specs["StatefulSet "+w.Name] = w.Spec.Template.Spec
		}
	}
	return specs
}

// Every manifest decodes strictly into the API types; every ax container
// is a native sidecar whose flags, environment variables and probe
// commands ax knows; the example has what the guide promises.
func TestKubernetesManifests(t *testing.T) {
	sidecarFlags, sidecarEnv := axFlags(t, "sidecar")
	sidecarEnv["AX_CLUSTER_TOKEN"] = true // read by --cluster-token's default
	healthFlags, _ := axFlags(t, "health")
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) < 2 {
		t.Fatalf("manifests: %v %v", files, err)
	}
	kinds := map[string]map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var objs []any
		kinds[f] = map[string]bool{}
		for i, doc := range splitDocs(b) {
			o, err := decodeStrict(doc)
			if err != nil {
				t.Errorf("%s document %d: %v", f, i+1, err)
				continue
			}
			objs = append(objs, o)
			switch o := o.(type) {
			case *corev1.Service:
				kinds[f]["Service"] = true
				if o.Spec.ClusterIP != "None" || !o.Spec.PublishNotReadyAddresses {
					t.Errorf("%s: Service %s: want headless with publishNotReadyAddresses", f, o.Name)
				}
			case *policyv1.PodDisruptionBudget:
				kinds[f]["PodDisruptionBudget"] = true
			case *networkingv1.NetworkPolicy:
				kinds[f]["NetworkPolicy"] = true
			case *appsv1.Deployment:
				kinds[f]["Deployment"] = true
				if o.Spec.Replicas == nil || *o.Spec.Replicas != 3 {
					t.Errorf("%s: Deployment replicas %v, want 3", f, o.Spec.Replicas)
				}
			case *appsv1.StatefulSet:
				kinds[f]["StatefulSet"] = true
				if len(o.Spec.VolumeClaimTemplates) == 0 {
					t.Errorf("%s: StatefulSet without volumeClaimTemplates", f)
				}
			}
		}
		checkNetworkPolicy(t, f, objs)
		for where, spec := range podSpecs(objs) {
			where = f + ": " + where
			if g := spec.TerminationGracePeriodSeconds; g == nil || *g <= 20 {
				t.Errorf("%s: terminationGracePeriodSeconds %v, want above the 20s drain timeout", where, g)
			}
			var ax *corev1.Container
			for i, c := range spec.InitContainers {
				if c.Name == "ax" {
					ax = &spec.InitContainers[i]
				}
			}
			if ax == nil {
				t.Errorf("%s: no init container named ax", where)
				continue
			}
			if ax.RestartPolicy == nil || *ax.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				t.Errorf("%s: the ax init container is not a native sidecar (restartPolicy: Always)", where)
			}
			checkArgs(t, where, ax.Args, "sidecar", sidecarFlags)
			args := strings.Join(ax.Args, " ")
			for _, want := range []string{"--join=dns:", "--raft-advertise=", "--peer-advertise=", "--raft-addr=0.0.0.0:", "--health-addr="} {
				if !strings.Contains(args, want) {
					t.Errorf("%s: ax args lack %s", where, want)
				}
			}
			for _, e := range ax.Env {
				if strings.HasPrefix(e.Name, "AX_") && !sidecarEnv[e.Name] {
					t.Errorf("%s: ax reads no variable %s", where, e.Name)
				}
				if e.Name == "AX_CLUSTER_TOKEN" && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
					t.Errorf("%s: AX_CLUSTER_TOKEN not from a Secret", where)
				}
			}
			if ax.Resources.Requests.Cpu().IsZero() || ax.Resources.Requests.Memory().IsZero() {
				t.Errorf("%s: ax has no resource requests", where)
			}
			for name, p := range map[string]*corev1.Probe{"startup": ax.StartupProbe, "liveness": ax.LivenessProbe, "readiness": ax.ReadinessProbe} {
				switch {
				case p == nil:
					t.Errorf("%s: no %s probe", where, name)
				case p.Exec != nil:
					cmd := p.Exec.Command
					if len(cmd) < 2 || cmd[0] != "/ax" {
						t.Errorf("%s: %s probe %q: want /ax health ...", where, name, cmd)
						continue
					}
					checkArgs(t, where+" "+name+" probe", cmd[1:], "health", healthFlags)
				case p.HTTPGet != nil:
					if p.HTTPGet.Path != "/healthz" && p.HTTPGet.Path != "/readyz" {
						t.Errorf("%s: %s probe path %s: the health port serves /healthz and /readyz", where, name, p.HTTPGet.Path)
					}
				}
			}
			shared := false
			for _, c := range spec.Containers {
				for _, m := range c.VolumeMounts {
					for _, am := range ax.VolumeMounts {
						shared = shared || (m.Name == am.Name && strings.Contains(args, "--socket="+m.MountPath+"/"))
					}
				}
			}
			if !shared {
				t.Errorf("%s: no app container mounts the volume of ax's socket", where)
			}
		}
	}
	want := map[string][]string{
		"kubernetes/deployment.yaml":  {"Service", "PodDisruptionBudget", "NetworkPolicy", "Deployment"},
		"kubernetes/statefulset.yaml": {"Service", "PodDisruptionBudget", "NetworkPolicy", "StatefulSet"},
	}
	for f, ks := range want {
		for _, k := range ks {
			if !kinds[f][k] {
				t.Errorf("%s: no %s", f, k)
			}
		}
	}
}

// checkNetworkPolicy checks that a manifest's NetworkPolicies select its
// workload's pods and let the pods of the same label reach every port its
// headless Service names (Raft and peer API), from those pods only.
func checkNetworkPolicy(t *testing.T, f string, objs []any) {
	t.Helper()
	var ports []int32
	var pods map[string]string
	var pols []*networkingv1.NetworkPolicy
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Service:
			for _, p := range o.Spec.Ports {
				ports = append(ports, p.Port)
			}
		case *appsv1.Deployment:
			pods = o.Spec.Template.Labels
		case *appsv1.StatefulSet:
			pods = o.Spec.Template.Labels
		case *networkingv1.NetworkPolicy:
			pols = append(pols, o)
		}
	}
	selects := func(sel metav1.LabelSelector) bool {
		if len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0 {
			return false // every pod: not what the peer ports want
		}
		for k, v := range sel.MatchLabels {
			if pods[k] != v {
				return false
			}
		}
		return len(sel.MatchExpressions) == 0
	}
	for _, port := range ports {
		open := false
		for _, np := range pols {
			if !selects(np.Spec.PodSelector) {
				continue
			}
			for _, rule := range np.Spec.Ingress {
				covers := len(rule.Ports) == 0
				for _, p := range rule.Ports {
					covers = covers || (p.Port != nil && p.Port.IntVal == port)
				}
				if !covers {
					continue
				}
				if len(rule.From) == 0 {
					t.Errorf("%s: NetworkPolicy %s lets any source reach port %d", f, np.Name, port)
				}
				for _, from := range rule.From {
					if from.PodSelector == nil || !selects(*from.PodSelector) || from.NamespaceSelector != nil || from.IPBlock != nil {
						t.Errorf("%s: NetworkPolicy %s lets other than the app's pods reach port %d", f, np.Name, port)
					}
				}
				open = true
			}
		}
		if !open {
			t.Errorf("%s: no NetworkPolicy lets the app's pods reach port %d", f, port)
		}
	}
}

// The compose file's and the systemd unit's ax command lines use only
// real flags.
func TestComposeAndSystemdFlags(t *testing.T) {
	sidecarFlags, sidecarEnv := axFlags(t, "sidecar")
	sidecarEnv["AX_CLUSTER_TOKEN"] = true
	healthFlags, _ := axFlags(t, "health")

	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Command     []string          `json:"command"`
			Environment map[string]string `json:"environment"`
			Healthcheck struct {
				Test []string `json:"test"`
			} `json:"healthcheck"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	if len(compose.Services) != 3 {
		t.Errorf("compose.yaml: %d services, want 3", len(compose.Services))
	}
	for name, s := range compose.Services {
		where := "compose.yaml service " + name
		checkArgs(t, where, s.Command, "sidecar", sidecarFlags)
		for e := range s.Environment {
			if strings.HasPrefix(e, "AX_") && !sidecarEnv[e] {
				t.Errorf("%s: ax reads no variable %s", where, e)
			}
		}
		if ht := s.Healthcheck.Test; len(ht) < 3 || ht[0] != "CMD" || ht[1] != "/ax" {
			t.Errorf("%s: healthcheck %q: want CMD /ax health ...", where, ht)
		} else {
			checkArgs(t, where+" healthcheck", ht[2:], "health", healthFlags)
		}
	}

	b, err = os.ReadFile("systemd/ax.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := strings.ReplaceAll(string(b), "\\\n", " ")
	var exec []string
	for _, line := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			exec = strings.Fields(v)
		}
		if m := regexp.MustCompile(`^#\s+(AX_[A-Z_]+)=`).FindStringSubmatch(line); m != nil && !sidecarEnv[m[1]] {
			t.Errorf("systemd/ax.service: the example sets %s, which ax does not read", m[1])
		}
	}
	if len(exec) < 2 || filepath.Base(exec[0]) != "ax" {
		t.Fatalf("systemd/ax.service: ExecStart %q: want .../ax sidecar ...", exec)
	}
	checkArgs(t, "systemd/ax.service", exec[1:], "sidecar", sidecarFlags)
}
