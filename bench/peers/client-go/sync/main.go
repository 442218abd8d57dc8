// Command sync is client-go v1.20.2's client for `cargo xtask bench e2e --compare`: a
// SharedIndexInformer of every ConfigMap (namespace index, one handler, no resync), built the
// way informers.NewSharedInformerFactory builds its ConfigMap informer (a ListWatch on the typed
// core/v1 client; the typed client alone keeps the build short), talking JSON (client-go's
// default content type).
//
// It speaks the protocol of the project's own sync-tokio / sync-smol clients: one JSON line
// {"event":"synced",...} once the informer has synced and its handler has seen every initial
// add, then, after --updates N update notifications, one {"event":"updates",...} line; each with
// wall time since the process started, user and system CPU (getrusage), VmRSS and VmHWM. The API
// server comes from $KUBECONFIG.
//
// For `cargo xtask bench scale --compare`: -resource pods makes it a typed Pod informer (as
// informers.NewSharedInformerFactory builds it), and -relist makes it, after the synced line,
// reset its peak RSS and wait for a relist (a second list returned and as many notifications
// as objects, which client-go's Replace gives for every object), then print
// {"event":"relisted",...}: its VmHWM is the peak during the relist.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

var started = time.Now()

func report(event, what string, n int) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	rss, hwm := status("VmRSS:"), status("VmHWM:")
	fmt.Printf("{\"event\":%q,%q:%d,\"wall_s\":%.3f,\"cpu_user_s\":%.4f,\"cpu_sys_s\":%.4f,\"rss_kb\":%d,\"hwm_kb\":%d}\n",
		event, what, n, time.Since(started).Seconds(),
		time.Duration(ru.Utime.Nano()).Seconds(), time.Duration(ru.Stime.Nano()).Seconds(), rss, hwm)
}

// status reads one KiB figure of /proc/self/status.
func status(key string) int64 {
	text, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(line, key) {
			f := strings.Fields(line)
			if len(f) >= 2 {
				n, _ := strconv.ParseInt(f[1], 10, 64)
				return n
			}
		}
	}
	return 0
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "client-go sync: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	updates := flag.Int64("updates", 0, "update notifications to wait for after the sync")
	timeoutS := flag.Int("timeout", 120, "seconds to wait for the sync, then for the updates")
	resource := flag.String("resource", "configmaps", "configmaps or pods")
	relist := flag.Bool("relist", false, "after the sync, wait for a relist and report its peak RSS")
	flag.Parse()
	timeout := time.Duration(*timeoutS) * time.Second

	config, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fail("kubeconfig: %v", err)
	}
	client, err := corev1client.NewForConfig(config)
	if err != nil {
		fail("client: %v", err)
	}
	var lists int64
	var lw *cache.ListWatch
	var example runtime.Object
	switch *resource {
	case "configmaps":
		example = &v1.ConfigMap{}
		lw = &cache.ListWatch{
			ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
				l, err := client.ConfigMaps(metav1.NamespaceAll).List(context.TODO(), o)
				atomic.AddInt64(&lists, 1)
				return l, err
			},
			WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
				return client.ConfigMaps(metav1.NamespaceAll).Watch(context.TODO(), o)
			},
		}
	case "pods":
		example = &v1.Pod{}
		lw = &cache.ListWatch{
			ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
				l, err := client.Pods(metav1.NamespaceAll).List(context.TODO(), o)
				atomic.AddInt64(&lists, 1)
				return l, err
			},
			WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
				return client.Pods(metav1.NamespaceAll).Watch(context.TODO(), o)
			},
		}
	default:
		fail("-resource %s: configmaps or pods", *resource)
	}
	informer := cache.NewSharedIndexInformer(lw, example, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	var adds, seen int64
	done := make(chan struct{}, 1)
	informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(interface{}) { atomic.AddInt64(&adds, 1) },
		UpdateFunc: func(_, _ interface{}) {
			if atomic.AddInt64(&seen, 1) == *updates {
				done <- struct{}{}
			}
		},
	})
	stop := make(chan struct{})
	go informer.Run(stop)

	// Synced: the informer has popped the initial list and the handler has seen every add.
	// (Polled every millisecond: cache.WaitForCacheSync polls every 100 ms, which would add up
	// to 100 ms to the figure.)
	deadline := time.Now().Add(timeout)
	poll := func(done func() bool) {
		for !done() {
			if time.Now().After(deadline) {
				fail("not synced after %v", timeout)
			}
			time.Sleep(time.Millisecond)
		}
	}
	poll(informer.HasSynced)
	objects := len(informer.GetStore().ListKeys())
	poll(func() bool { return atomic.LoadInt64(&adds) >= int64(objects) })
	report("synced", "objects", objects)
	if *relist {
		// The peak from here on is the relist's (Linux: 5 resets VmHWM to VmRSS).
		if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
			fail("resetting the peak RSS: %v", err)
		}
		listed := atomic.LoadInt64(&lists)
		before := atomic.LoadInt64(&seen)
		deadline = time.Now().Add(timeout)
		poll(func() bool {
			return atomic.LoadInt64(&lists) > listed && atomic.LoadInt64(&seen) >= before+int64(objects)
		})
		time.Sleep(time.Second)
		report("relisted", "objects", len(informer.GetStore().ListKeys()))
	}
	if *updates > 0 {
		select {
		case <-done:
			report("updates", "updates", int(*updates))
		case <-time.After(timeout):
			fail("saw %d of %d updates in %v", atomic.LoadInt64(&seen), *updates, timeout)
		}
	}
	close(stop)
}
