// Command podwatch is client-go v1.20.2's side of `cargo xtask bench pod-watch --compare`: the
// Pod watch events of informer-bench's `pod-watch` (bench/src/bin/pod-watch.rs), the same bytes,
// through client-go's own watch decoding and SharedIndexInformer.
//
// Input (-input FILE, written by `pod-watch --write-events`): the -pods Pods of the list, one
// JSON line each, then -pods × -rounds MODIFIED event lines, round by round, with `@RV@` where
// the resourceVersion goes. Event j is template j % (pods × rounds) at resourceVersion
// pods + 1 + j, as on the Rust side.
//
// Path of every event, as a typed Pod informer on a real apiserver's JSON watch:
//
//	bytes -> the JSON framer -> streaming decoder (metav1.WatchEvent) -> the typed client's
//	object decoder (scheme.Codecs, json-iterator) -> StreamWatcher's channel -> Reflector ->
//	DeltaFIFO -> HandleDeltas -> Indexer (namespace index) -> sharedProcessor -> one handler
//	(reads the name, resourceVersion and `app` label of the new Pod).
//
// The lines of a chunk of 20,000 events are built outside the timed part and written into an
// io.Pipe that the StreamWatcher reads, as it reads a response body; the timed part of a chunk
// ends when the handler has seen all of its events. CPU time is the whole process's
// (getrusage: every thread, the garbage collector included), wall time the timed parts'.
//
// After the events: the heap per cached Pod (runtime.MemStats.HeapAlloc after two forced
// collections, minus the same before the list; the templates are held in both).
//
// Output: human-readable figures on stdout and, with -report FILE, one JSON line in FILE.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	restclientwatch "k8s.io/client-go/rest/watch"
	"k8s.io/client-go/tools/cache"
)

const chunkSize = 20000

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "client-go podwatch: "+format+"\n", args...)
	os.Exit(1)
}

// source is the ListerWatcher: the list, then one watch reading the harness's pipe.
type source struct {
	list    *v1.PodList
	watch   watch.Interface
	watches int32
}

func (s *source) List(metav1.ListOptions) (runtime.Object, error) { return s.list, nil }

func (s *source) Watch(metav1.ListOptions) (watch.Interface, error) {
	if atomic.AddInt32(&s.watches, 1) > 1 {
		fmt.Fprintln(os.Stderr, "client-go podwatch: the reflector watched twice; aborting")
		os.Exit(2)
	}
	return s.watch, nil
}

// reporter turns a decoding error into the object the StreamWatcher sends (it must not happen).
type reporter struct{}

func (reporter) AsObject(err error) runtime.Object {
	fmt.Fprintln(os.Stderr, "client-go podwatch: decoding a watch event:", err)
	os.Exit(1)
	return nil
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func heapAfterGC() uint64 {
	goruntime.GC()
	goruntime.GC()
	var m goruntime.MemStats
	goruntime.ReadMemStats(&m)
	return m.HeapAlloc
}

func main() {
	file := flag.String("input", "", "the list and event templates written by pod-watch --write-events")
	pods := flag.Int("pods", 10000, "Pods in the list")
	rounds := flag.Int("rounds", 2, "status rounds (templates per Pod)")
	events := flag.Int("events", 1000000, "watch events")
	report := flag.String("report", "", "append one JSON line with the figures to this file")
	profile := flag.String("cpuprofile", "", "write a CPU profile of the events to this file")
	flag.Parse()
	if *file == "" {
		fail("-input FILE is required")
	}

	// The typed client's decoders for application/json (rest.Request.Watch with a clientset's
	// config: NegotiatedSerializer = scheme.Codecs.WithoutConversion()).
	codecs := scheme.Codecs.WithoutConversion()
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok || info.StreamSerializer == nil {
		fail("no JSON stream serializer")
	}
	objectDecoder := codecs.DecoderToVersion(info.Serializer, v1.SchemeGroupVersion)

	f, err := os.Open(*file)
	if err != nil {
		fail("%v", err)
	}
	rd := bufio.NewReaderSize(f, 1<<20)
	readLine := func() []byte {
		line, err := rd.ReadBytes('\n')
		if err != nil {
			fail("%s: %v", *file, err)
		}
		return line
	}
	// The templates first (the list's lines skipped), so that the heap before the list holds
	// them and nothing of the list.
	var jsonBytes int
	for i := 0; i < *pods; i++ {
		jsonBytes += len(readLine()) - 1
	}
	placeholder := []byte("@RV@")
	type template struct{ before, after []byte }
	templates := make([]template, *pods**rounds)
	for i := range templates {
		line := readLine()
		at := bytes.Index(line, placeholder)
		if at < 0 {
			fail("template %d has no @RV@", i)
		}
		templates[i] = template{line[:at], line[at+len(placeholder):]}
	}
	f.Close()
	base := heapAfterGC()

	f, err = os.Open(*file)
	if err != nil {
		fail("%v", err)
	}
	rd = bufio.NewReaderSize(f, 1<<20)
	items := make([]v1.Pod, *pods)
	for i := range items {
		obj, err := runtime.Decode(objectDecoder, readLine())
		if err != nil {
			fail("list item %d: %v", i, err)
		}
		items[i] = *obj.(*v1.Pod)
	}
	f.Close()

	pr, pw := io.Pipe()
	frames := info.StreamSerializer.Framer.NewFrameReader(pr)
	watchEvents := streaming.NewDecoder(frames, info.StreamSerializer.Serializer)
	w := watch.NewStreamWatcher(restclientwatch.NewDecoder(watchEvents, objectDecoder), reporter{})
	src := &source{list: &v1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(*pods)}, Items: items}, watch: w}
	items = nil

	informer := cache.NewSharedIndexInformer(src, &v1.Pod{}, 0, cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
	})
	var adds, updates, other, readBytes int64
	var target int64 = int64(*pods)
	done := make(chan struct{}, 1)
	seen := func() {
		if atomic.AddInt64(&adds, 0)+atomic.AddInt64(&updates, 0) == atomic.LoadInt64(&target) {
			done <- struct{}{}
		}
	}
	informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(interface{}) { atomic.AddInt64(&adds, 1); seen() },
		UpdateFunc: func(_, obj interface{}) {
			p := obj.(*v1.Pod)
			readBytes += int64(len(p.Name) + len(p.ResourceVersion) + len(p.Labels["app"]))
			atomic.AddInt64(&updates, 1)
			seen()
		},
		DeleteFunc: func(interface{}) { atomic.AddInt64(&other, 1) },
	})
	stop := make(chan struct{})
	t0 := time.Now()
	go informer.Run(stop)
	<-done
	listWall := time.Since(t0)
	src.list = nil
	afterList := heapAfterGC()

	if *profile != "" {
		pf, err := os.Create(*profile)
		if err != nil {
			fail("%v", err)
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			fail("%v", err)
		}
		defer pprof.StopCPUProfile()
	}
	var wall, cpu time.Duration
	var gcBefore goruntime.MemStats
	goruntime.ReadMemStats(&gcBefore)
	for fed := 0; fed < *events; {
		n := chunkSize
		if *events-fed < n {
			n = *events - fed
		}
		var buf bytes.Buffer
		for j := fed; j < fed+n; j++ {
			t := templates[j%len(templates)]
			buf.Write(t.before)
			buf.WriteString(strconv.Itoa(*pods + 1 + j))
			buf.Write(t.after)
		}
		chunk := buf.Bytes()
		atomic.AddInt64(&target, int64(n))
		cpu0, t0 := cpuNow(), time.Now()
		if _, err := pw.Write(chunk); err != nil {
			fail("writing the watch stream: %v", err)
		}
		<-done
		wall += time.Since(t0)
		cpu += cpuNow() - cpu0
		fed += n
	}
	var gcAfter goruntime.MemStats
	goruntime.ReadMemStats(&gcAfter)
	afterEvents := heapAfterGC()
	goruntime.KeepAlive(templates) // held at `base` too

	cached := informer.GetIndexer().ListKeys()
	lastRV := strconv.Itoa(*pods + *events)
	found := false
	for _, o := range informer.GetIndexer().List() {
		if o.(*v1.Pod).ResourceVersion == lastRV {
			found = true
		}
	}
	close(stop)
	if len(cached) != *pods || updates != int64(*events) || other != 0 || !found {
		fail("wrong result: %d cached (want %d), %d updates (want %d), %d deletes, last resourceVersion found: %v",
			len(cached), *pods, updates, *events, other, found)
	}
	perPod := func(h uint64) float64 { return (float64(h) - float64(base)) / float64(*pods) }
	json_ := float64(jsonBytes) / float64(*pods)
	fmt.Printf("client-go v1.20.2 typed Pod informer, Go %s, GOMAXPROCS %d, GOGC %s: list in %.0f ms\n",
		goruntime.Version(), goruntime.GOMAXPROCS(0), envOr("GOGC", "100 (default)"), ms(listWall))
	fmt.Printf("client-go      %10.0f events/s %10.0f events/CPU-s (%.2f cores busy; every thread, GC included; %d collections)   heap/Pod %6.0f B after the list, %6.0f B after the events (%.2fx the JSON)\n",
		float64(*events)/wall.Seconds(), float64(*events)/cpu.Seconds(), cpu.Seconds()/wall.Seconds(),
		gcAfter.NumGC-gcBefore.NumGC, perPod(afterList), perPod(afterEvents), perPod(afterEvents)/json_)
	if *report != "" {
		line, _ := json.Marshal(map[string]interface{}{
			"bench": "client-go", "workload": "pods", "pods": *pods, "events": *events,
			"wall_s": wall.Seconds(), "cpu_s": cpu.Seconds(), "gomaxprocs": goruntime.GOMAXPROCS(0),
			"heap_per_pod_list": perPod(afterList), "heap_per_pod_events": perPod(afterEvents),
			"json_bytes": json_, "peak_rss_kb": maxRSSKiB(),
		})
		f, err := os.OpenFile(*report, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			_, err = f.Write(append(line, '\n'))
			f.Close()
		}
		if err != nil {
			fail("writing the report: %v", err)
		}
	}
}

func maxRSSKiB() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
