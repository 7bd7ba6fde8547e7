// Command upstream-bench is the Go half of `cargo xtask bench schedule --upstream`.
//
// Upstream's scheduling benchmark (scheduling_benchmark_test.go, built separately with `go test -c -tags
// test_performance`) reports time and node counts but no cost, and its pods live only inside the test binary.
// This program rebuilds the same workloads through upstream's exported API and:
//
//   - writes the catalog the benchmark schedules against, fake.InstanceTypes(400), as a catalog file
//     (OUT/catalog.json, the format `karpenter schedule --instance-types` reads);
//   - draws the benchmark's pods from the same seeded source in the same order (the same sizes run in the
//     same sequence draw the same values) and writes each workload's pods as a JSON array (OUT/NAME.pods.json);
//   - solves each workload once with upstream's scheduler, set up as the benchmark sets it up, and prints
//     one JSON line: pods, seconds of Solve, NodeClaims, and their cost (the price of the cheapest compatible
//     offering among each NodeClaim's instance types, which is what the fake cloud provider launches).
//
// Only names, UIDs and creation times differ from the benchmark's pods: they are sequential here, so both
// schedulers see the pods in one order (the benchmark's creation times increase in the same order).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	fakecr "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/fake"
	"sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/events"
	"sigs.k8s.io/karpenter/pkg/operator/injection"
	"sigs.k8s.io/karpenter/pkg/operator/logging"
	"sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/karpenter/pkg/test"
)

// The benchmark's seed, catalog size, preference workload size and value sets.
const (
	seed            = 42
	instanceTypes   = 400
	preferencePods  = 4000
	zoneKey         = corev1.LabelTopologyZone
	hostnameKey     = corev1.LabelHostname
	concurrentRecon = 5
)

var (
	labelValues = []string{"a", "b", "c", "d", "e", "f", "g"}
	cpuMilli    = []int{100, 250, 500, 1000, 1500}
	memoryMiB   = []int{100, 256, 512, 1024, 2048, 4096}
)

// source draws pod shapes; one source serves every workload of a run, in the benchmark's order.
type source struct{ r *rand.Rand }

func (s source) label() string { return labelValues[s.r.Intn(len(labelValues))] }

// requests draws CPU, then memory.
func (s source) requests() corev1.ResourceRequirements {
	cpu := cpuMilli[s.r.Intn(len(cpuMilli))]
	mem := memoryMiB[s.r.Intn(len(memoryMiB))]
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(fmt.Sprintf("%dm", cpu)),
		corev1.ResourceMemory: resource.MustParse(fmt.Sprintf("%dMi", mem)),
	}}
}

func selector(labels map[string]string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: labels}
}

// diverse is the benchmark's five-class mix of n pods: n/5 each of generic, zone spread, hostname spread,
// zone self-affinity and hostname anti-affinity, the remainder generic. Draws happen in the order the fields
// appear in each pod (own label, selector label, CPU, memory).
func diverse(s source, n int) []*corev1.Pod {
	k := n / 5
	var out []*corev1.Pod
	repeat := func(count int, options func() test.PodOptions) {
		for range count {
			out = append(out, test.Pod(options()))
		}
	}
	generic := func() test.PodOptions {
		labels := map[string]string{"my-label": s.label()}
		return test.PodOptions{ObjectMeta: metav1.ObjectMeta{Labels: labels}, ResourceRequirements: s.requests()}
	}
	spread := func(key string) func() test.PodOptions {
		return func() test.PodOptions {
			labels := map[string]string{"my-label": s.label()}
			selected := map[string]string{"my-label": s.label()}
			return test.PodOptions{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
					MaxSkew: 1, TopologyKey: key, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: selector(selected),
				}},
				ResourceRequirements: s.requests(),
			}
		}
	}
	selfAffinity := func() test.PodOptions {
		labels := map[string]string{"my-affininity": s.label()}
		return test.PodOptions{
			ObjectMeta:           metav1.ObjectMeta{Labels: labels},
			PodRequirements:      []corev1.PodAffinityTerm{{LabelSelector: selector(labels), TopologyKey: zoneKey}},
			ResourceRequirements: s.requests(),
		}
	}
	antiAffinity := func() test.PodOptions {
		labels := map[string]string{"app": "nginx"}
		return test.PodOptions{
			ObjectMeta:           metav1.ObjectMeta{Labels: labels},
			PodAntiRequirements:  []corev1.PodAffinityTerm{{LabelSelector: selector(labels), TopologyKey: hostnameKey}},
			ResourceRequirements: s.requests(),
		}
	}
	repeat(k, generic)
	repeat(k, spread(zoneKey))
	repeat(k, spread(hostnameKey))
	repeat(k, selfAffinity)
	repeat(k, antiAffinity)
	repeat(n-len(out), generic)
	return out
}

// preferences is the benchmark's preference workload: n identical pods (one draw of CPU and memory) preferring
// test-zone-1, with preferred zone (weight 10, unsatisfiable) and hostname (weight 1) anti-affinity to each other.
func preferences(s source, n int) []*corev1.Pod {
	labels := map[string]string{"app": "nginx"}
	term := func(weight int32, key string) corev1.WeightedPodAffinityTerm {
		return corev1.WeightedPodAffinityTerm{Weight: weight, PodAffinityTerm: corev1.PodAffinityTerm{
			LabelSelector: selector(labels), TopologyKey: key,
		}}
	}
	options := test.PodOptions{
		ObjectMeta:           metav1.ObjectMeta{Labels: labels},
		NodePreferences:      []corev1.NodeSelectorRequirement{{Key: zoneKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"test-zone-1"}}},
		PodAntiPreferences:   []corev1.WeightedPodAffinityTerm{term(10, zoneKey), term(1, hostnameKey)},
		ResourceRequirements: s.requests(),
	}
	out := make([]*corev1.Pod, 0, n)
	for range n {
		out = append(out, test.Pod(options))
	}
	return out
}

type workload struct {
	name string
	pods func(source) []*corev1.Pod
	opts []scheduling.Options
}

// plan lists the workloads in the benchmark's order: diverse sizes ascending, then Respect, then Ignore.
func plan(sizes []int, withPreferences bool) []workload {
	var out []workload
	for _, n := range sizes {
		out = append(out, workload{name: fmt.Sprintf("diverse-%d", n), pods: func(s source) []*corev1.Pod { return diverse(s, n) }})
	}
	if withPreferences {
		pods := func(s source) []*corev1.Pod { return preferences(s, preferencePods) }
		out = append(out,
			workload{name: fmt.Sprintf("preferences-respect-%d", preferencePods), pods: pods},
			workload{name: fmt.Sprintf("preferences-ignore-%d", preferencePods), pods: pods, opts: []scheduling.Options{scheduling.IgnorePreferences}},
		)
	}
	return out
}

// renumber gives the pods sequential names, UIDs and creation times, in the order they were made.
func renumber(name string, pods []*corev1.Pod) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, p := range pods {
		p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
		p.Name = fmt.Sprintf("%s-%06d", name, i)
		p.Namespace = "default"
		p.UID = types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012x", i))
		p.CreationTimestamp = metav1.NewTime(base.Add(time.Duration(i) * time.Second))
	}
}

func writeJSON(path string, write func(*json.Encoder) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if err := write(json.NewEncoder(w)); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writePods(path string, pods []*corev1.Pod) error {
	return writeJSON(path, func(e *json.Encoder) error { return e.Encode(pods) })
}

// Catalog file types (the fields `karpenter schedule --instance-types` reads).
type catalogRequirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values"`
}
type catalogOffering struct {
	Zone         string  `json:"zone"`
	CapacityType string  `json:"capacityType"`
	Price        float64 `json:"price"`
	Available    bool    `json:"available"`
}
type catalogOverhead struct {
	KubeReserved      map[string]string `json:"kubeReserved"`
	SystemReserved    map[string]string `json:"systemReserved"`
	EvictionThreshold map[string]string `json:"evictionThreshold"`
}
type catalogType struct {
	Name         string               `json:"name"`
	Requirements []catalogRequirement `json:"requirements"`
	Capacity     map[string]string    `json:"capacity"`
	Overhead     catalogOverhead      `json:"overhead"`
	Offerings    []catalogOffering    `json:"offerings"`
}
type catalogFile struct {
	WellKnownLabels []string      `json:"wellKnownLabels"`
	InstanceTypes   []catalogType `json:"instanceTypes"`
}

func quantities(list corev1.ResourceList) map[string]string {
	out := map[string]string{}
	for name, q := range list {
		out[string(name)] = q.String()
	}
	return out
}

func catalog(its []*cloudprovider.InstanceType) catalogFile {
	file := catalogFile{WellKnownLabels: []string{fake.LabelInstanceSize, fake.ExoticInstanceLabelKey, fake.IntegerInstanceLabelKey}}
	for _, it := range its {
		t := catalogType{Name: it.Name, Capacity: quantities(it.Capacity)}
		for _, r := range it.Requirements.NodeSelectorRequirements() {
			t.Requirements = append(t.Requirements, catalogRequirement{Key: r.Key, Operator: string(r.Operator), Values: r.Values})
		}
		if it.Overhead != nil {
			t.Overhead = catalogOverhead{
				KubeReserved:      quantities(it.Overhead.KubeReserved),
				SystemReserved:    quantities(it.Overhead.SystemReserved),
				EvictionThreshold: quantities(it.Overhead.EvictionThreshold),
			}
		}
		for _, o := range it.Offerings {
			t.Offerings = append(t.Offerings, catalogOffering{Zone: o.Zone(), CapacityType: o.CapacityType(), Price: o.Price, Available: o.Available})
		}
		file.InstanceTypes = append(file.InstanceTypes, t)
	}
	return file
}

// result is one JSON line of output.
type result struct {
	Workload  string  `json:"workload"`
	Pods      int     `json:"pods"`
	Seconds   float64 `json:"seconds"`
	Nodes     int     `json:"nodes"`
	Cost      float64 `json:"cost"`
	PodErrors int     `json:"podErrors"`
}

// launchPrice is what the fake cloud provider would pay for a NodeClaim: the cheapest available offering,
// compatible with the NodeClaim's requirements, of any of its instance types.
func launchPrice(n *scheduling.NodeClaim) float64 {
	best := -1.0
	for _, it := range n.InstanceTypeOptions {
		offerings := it.Offerings.Available().Compatible(n.Requirements)
		if len(offerings) == 0 {
			continue
		}
		if p := offerings.Cheapest().Price; best < 0 || p < best {
			best = p
		}
	}
	return max(best, 0)
}

// solve sets the scheduler up as the benchmark does (one NodePool with limits of 10,000,000 CPU and
// 10,000,000Gi memory, the 400 fake types, an empty cluster, five concurrent reconciles) and times one Solve.
func solve(ctx context.Context, w workload, pods []*corev1.Pod, its []*cloudprovider.InstanceType) (result, error) {
	nodePool := test.NodePool(v1.NodePool{Spec: v1.NodePoolSpec{Limits: v1.Limits{
		corev1.ResourceCPU:    resource.MustParse("10000000"),
		corev1.ResourceMemory: resource.MustParse("10000000Gi"),
	}}})
	provider := fake.NewCloudProvider()
	provider.InstanceTypes = its
	kube := fakecr.NewFakeClient()
	clk := &clock.RealClock{}
	cluster := state.NewCluster(clk, kube, provider)
	byPool := map[string][]*cloudprovider.InstanceType{nodePool.Name: its}
	opts := append(append([]scheduling.Options{}, w.opts...), scheduling.NumConcurrentReconciles(concurrentRecon))
	topology, err := scheduling.NewTopology(ctx, kube, cluster, nil, []*v1.NodePool{nodePool}, byPool, pods, opts...)
	if err != nil {
		return result{}, fmt.Errorf("%s: topology: %w", w.name, err)
	}
	s := scheduling.NewScheduler(ctx, kube, []*v1.NodePool{nodePool}, cluster, nil, topology, byPool, nil,
		events.NewRecorder(&record.FakeRecorder{}), clk, nil, nil, opts...)
	runtime.GC()
	start := time.Now()
	results, err := s.Solve(ctx, pods)
	seconds := time.Since(start).Seconds()
	if err != nil {
		return result{}, fmt.Errorf("%s: solve: %w", w.name, err)
	}
	cost := 0.0
	for _, n := range results.NewNodeClaims {
		cost += launchPrice(n)
	}
	return result{
		Workload: w.name, Pods: len(pods), Seconds: seconds, Nodes: len(results.NewNodeClaims), Cost: cost,
		PodErrors: len(results.PodErrors),
	}, nil
}

func parseSizes(text string) ([]int, error) {
	var sizes []int
	for _, field := range strings.Split(text, ",") {
		if field = strings.TrimSpace(field); field == "" {
			continue
		}
		n, err := strconv.Atoi(field)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-sizes: %q is not a pod count", field)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

func run() error {
	out := flag.String("out", "", "directory for catalog.json and NAME.pods.json (required)")
	sizesText := flag.String("sizes", "1000,5000,10000,20000", "diverse workload sizes, ascending, comma-separated")
	withPreferences := flag.Bool("preferences", true, "also run the two 4000-pod preference workloads")
	dumpOnly := flag.Bool("dump-only", false, "write the catalog and pods without solving")
	flag.Parse()
	if *out == "" {
		return fmt.Errorf("-out is required")
	}
	sizes, err := parseSizes(*sizesText)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	log.SetLogger(logging.NopLogger)
	ctx := options.ToContext(injection.WithControllerName(context.Background(), "provisioner"), test.Options())

	its := fake.InstanceTypes(instanceTypes)
	if err := writeJSON(filepath.Join(*out, "catalog.json"), func(e *json.Encoder) error { return e.Encode(catalog(its)) }); err != nil {
		return err
	}
	src := source{r: rand.New(rand.NewSource(seed))} //nolint:gosec // the benchmark's seeded source
	stdout := json.NewEncoder(os.Stdout)
	for _, w := range plan(sizes, *withPreferences) {
		pods := w.pods(src)
		renumber(w.name, pods)
		if err := writePods(filepath.Join(*out, w.name+".pods.json"), pods); err != nil {
			return err
		}
		if *dumpOnly {
			continue
		}
		res, err := solve(ctx, w, pods, its)
		if err != nil {
			return err
		}
		if err := stdout.Encode(res); err != nil {
			return err
		}
	}
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "upstream-bench:", err)
		os.Exit(1)
	}
}
