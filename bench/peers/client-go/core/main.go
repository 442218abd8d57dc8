// Command core is client-go v1.20.2's side of `cargo xtask bench core --compare`: the workload
// of informer-core's pipeline benchmark (informer-core/benches/common/pipeline_body.rs) through
// client-go's own SharedIndexInformer.
//
// Workload (identical objects and event sequence: the same SplitMix64 generator and seed):
// 100,000 ConfigMaps of about 1 KB (10 namespaces, 3 labels, 4 data entries) as the initial
// list, then 1,000,000 watch events (60% modify, 20% add, 20% delete) through Reflector ->
// DeltaFIFO -> HandleDeltas -> Indexer (namespace index + `app` label index) -> sharedProcessor
// -> 4 counting handlers. Objects are built outside the timed part, in chunks of 20,000, as a
// transport would hand them over.
//
// What differs from informer-core's benchmark, because client-go's API allows no closer match:
//   - DeltaFIFO, HandleDeltas and the sharedProcessor are reachable only through
//     NewSharedIndexInformer, which runs a Reflector on a ListerWatcher. The events therefore
//     enter through a fake ListerWatcher whose watch is a buffered Go channel: the timed part
//     includes the reflector's per-event work and one channel hand-off, which informer-core's
//     benchmark (events handed straight to the pipeline) does not have.
//   - client-go runs the reflector, the FIFO pop loop and each handler in goroutines: it uses
//     every core (GOMAXPROCS), so besides wall time the harness reports CPU time of the whole
//     process (getrusage RUSAGE_SELF, user + system, every thread and the garbage collector)
//     over the timed part. The timed part of a chunk ends when all 4 handlers have counted all
//     its events.
//   - Objects are typed corev1.ConfigMap structs built directly (what a decoder hands over),
//     not decoded from JSON text, so the harness leaves no garbage for the collector to find
//     inside the timed part.
//
// Output: human-readable figures on stdout and, with -report FILE, one JSON line in FILE.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/bits"
	"os"
	goruntime "runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

const (
	namespaces = 10
	chunkSize  = 20000
	handlers   = 4
)

var apps = [8]string{"web", "api", "db", "cache", "queue", "auth", "search", "batch"}
var tiers = [3]string{"frontend", "backend", "data"}

var created = time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)

// rng is SplitMix64, as in pipeline_body.rs.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9E3779B97F4A7C15
	z := r.s
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

func (r *rng) below(n int) int { return int(r.next() % uint64(n)) }

// configMap is config_map() of pipeline_body.rs: the same fields, the same random data.
func configMap(id int, rv uint64, r *rng) *v1.ConfigMap {
	data := make(map[string]string, 4)
	for k := 0; k < 4; k++ {
		var b strings.Builder
		b.Grow(200)
		for i := 0; i < 200; i++ {
			b.WriteByte(byte('a' + r.below(26)))
		}
		data[fmt.Sprintf("key-%d.conf", k)] = b.String()
	}
	hi, lo := bits.Mul64(uint64(id), 0x9E3779B97F4A7C15)
	return &v1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name:              fmt.Sprintf("cm-%07d", id),
			Namespace:         fmt.Sprintf("ns-%d", id%namespaces),
			UID:               types.UID(fmt.Sprintf("%016x%016x", hi, lo)),
			ResourceVersion:   fmt.Sprint(rv),
			CreationTimestamp: metav1.NewTime(created),
			Labels: map[string]string{
				"app":  apps[id%len(apps)],
				"tier": tiers[id%3],
				"team": fmt.Sprintf("team-%d", id%17),
			},
		},
		Data: data,
	}
}

// source is the ListerWatcher: the initial list, then one watch fed by the harness.
type source struct {
	list    *v1.ConfigMapList
	events  chan watch.Event
	watches int32
}

func (s *source) List(metav1.ListOptions) (runtime.Object, error) { return s.list, nil }

func (s *source) Watch(metav1.ListOptions) (watch.Interface, error) {
	if atomic.AddInt32(&s.watches, 1) > 1 {
		// A second watch means the reflector restarted: the run would not be the workload.
		fmt.Fprintln(os.Stderr, "client-go core bench: the reflector watched twice; aborting")
		os.Exit(2)
	}
	return &chanWatch{ch: s.events}, nil
}

type chanWatch struct{ ch chan watch.Event }

func (w *chanWatch) Stop()                          {}
func (w *chanWatch) ResultChan() <-chan watch.Event { return w.ch }

// counter is one handler: it counts what it is told and signals when it has seen `target`
// notifications in all.
type counter struct {
	adds, updates, deletes int64
	total                  int64
	target                 *int64
	done                   chan struct{}
}

func (c *counter) seen() {
	if atomic.AddInt64(&c.total, 1) == atomic.LoadInt64(c.target) {
		c.done <- struct{}{}
	}
}

func (c *counter) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(interface{}) { atomic.AddInt64(&c.adds, 1); c.seen() },
		UpdateFunc: func(_, _ interface{}) { atomic.AddInt64(&c.updates, 1); c.seen() },
		DeleteFunc: func(interface{}) { atomic.AddInt64(&c.deletes, 1); c.seen() },
	}
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func maxRSSKiB() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss // KiB on Linux
}

func main() {
	report := flag.String("report", "", "append one JSON line with the figures to this file")
	scale := flag.Int("scale", 1, "divide the workload by this (for a quick check; not a measurement)")
	flag.Parse()
	objects, events := 100000 / *scale, 1000000 / *scale

	r := &rng{0x5EED}
	items := make([]v1.ConfigMap, objects)
	for i := range items {
		items[i] = *configMap(i, 1, r)
	}
	list := &v1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: items}
	src := &source{list: list, events: make(chan watch.Event, 1024)}

	informer := cache.NewSharedIndexInformer(src, &v1.ConfigMap{}, 0, cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
		"app": func(obj interface{}) ([]string, error) {
			if app, ok := obj.(*v1.ConfigMap).Labels["app"]; ok {
				return []string{app}, nil
			}
			return nil, nil
		},
	})
	target := int64(objects)
	done := make(chan struct{}, handlers)
	counters := make([]*counter, handlers)
	for i := range counters {
		counters[i] = &counter{target: &target, done: done}
		informer.AddEventHandler(counters[i].handler())
	}
	wait := func() {
		for i := 0; i < handlers; i++ {
			<-done
		}
	}

	// Initial replace: list, DeltaFIFO.Replace, pop, index, deliver (until every handler has
	// every add).
	stop := make(chan struct{})
	cpu0, t0 := cpuNow(), time.Now()
	go informer.Run(stop)
	wait()
	replaceWall, replaceCPU := time.Since(t0), cpuNow()-cpu0
	list, items = nil, nil
	src.list = nil

	// Events, chunk by chunk.
	live := make([]int, objects)
	for i := range live {
		live[i] = i
	}
	nextID, rv := objects, uint64(2)
	var nMod, nAdd, nDel int
	var wall, cpu time.Duration
	var gcBefore goruntime.MemStats
	goruntime.ReadMemStats(&gcBefore)
	for fed := 0; fed < events; {
		n := chunkSize
		if events-fed < n {
			n = events - fed
		}
		chunk := make([]watch.Event, 0, n)
		for i := 0; i < n; i++ {
			rv++
			roll := r.below(10)
			switch {
			case roll < 6:
				nMod++
				id := live[r.below(len(live))]
				chunk = append(chunk, watch.Event{Type: watch.Modified, Object: configMap(id, rv, r)})
			case roll < 8 || len(live) == 0:
				nAdd++
				id := nextID
				nextID++
				live = append(live, id)
				chunk = append(chunk, watch.Event{Type: watch.Added, Object: configMap(id, rv, r)})
			default:
				nDel++
				at := r.below(len(live))
				id := live[at]
				live[at] = live[len(live)-1]
				live = live[:len(live)-1]
				chunk = append(chunk, watch.Event{Type: watch.Deleted, Object: configMap(id, rv, r)})
			}
		}
		atomic.AddInt64(&target, int64(n))
		cpu0, t0 := cpuNow(), time.Now()
		for i := range chunk {
			src.events <- chunk[i]
			chunk[i] = watch.Event{}
		}
		wait()
		wall += time.Since(t0)
		cpu += cpuNow() - cpu0
		fed += n
	}
	var gcAfter goruntime.MemStats
	goruntime.ReadMemStats(&gcAfter)
	peakRSS := maxRSSKiB()

	cached := len(informer.GetIndexer().ListKeys())
	web, err := informer.GetIndexer().ByIndex("app", "web")
	close(stop)
	ok := err == nil && cached == len(live) && len(web) > 0
	for i, c := range counters {
		if c.adds != int64(objects+nAdd) || c.updates != int64(nMod) || c.deletes != int64(nDel) {
			fmt.Fprintf(os.Stderr, "handler %d: %d adds, %d updates, %d deletes; want %d, %d, %d\n",
				i, c.adds, c.updates, c.deletes, objects+nAdd, nMod, nDel)
			ok = false
		}
	}
	if !ok {
		fmt.Fprintf(os.Stderr, "client-go core bench: wrong result (cached %d, live %d, index err %v)\n", cached, len(live), err)
		os.Exit(1)
	}

	if *scale > 1 {
		fmt.Printf("(scaled down by %d: not a measurement)\n", *scale)
	}
	fmt.Printf("client-go v1.20.2 SharedIndexInformer, Go %s, GOMAXPROCS %d, GOGC %s\n",
		goruntime.Version(), goruntime.GOMAXPROCS(0), envOr("GOGC", "100 (default)"))
	fmt.Printf("  objects: %d ConfigMaps; initial replace %.1f ms wall, %.1f ms CPU\n",
		objects, ms(replaceWall), ms(replaceCPU))
	fmt.Printf("  events: %d (%d modify, %d add, %d delete) through %d handlers; %d cached at the end\n",
		events, nMod, nAdd, nDel, handlers, cached)
	fmt.Printf("  throughput: %.0f events/s wall (%.0f ns/event)\n",
		float64(events)/wall.Seconds(), float64(wall.Nanoseconds())/float64(events))
	fmt.Printf("  CPU: %.0f events per CPU-second (%.0f ns CPU/event, %.2f cores busy on average; every thread, GC included)\n",
		float64(events)/cpu.Seconds(), float64(cpu.Nanoseconds())/float64(events), cpu.Seconds()/wall.Seconds())
	fmt.Printf("  garbage collections during the events: %d; peak RSS %.1f MiB\n",
		gcAfter.NumGC-gcBefore.NumGC, float64(peakRSS)/1024)
	if *report != "" {
		line, _ := json.Marshal(map[string]interface{}{
			"bench": "client-go", "workload": "configmaps", "objects": objects, "events": events,
			"wall_s": wall.Seconds(), "cpu_s": cpu.Seconds(), "replace_s": replaceWall.Seconds(),
			"peak_rss_kb": peakRSS, "gomaxprocs": goruntime.GOMAXPROCS(0),
		})
		f, err := os.OpenFile(*report, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			_, err = f.Write(append(line, '\n'))
			f.Close()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "client-go core bench: writing the report:", err)
			os.Exit(1)
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
