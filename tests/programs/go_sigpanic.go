// A goroutine faults at a function's first instruction: crash reads a field of a nil
// pointer and has no frame of its own. Go's signal handler makes the goroutine call
// runtime.sigpanic as if from the faulting instruction (its address pushed as the return
// address), and sigpanic panics.
package main

import "os"

type T struct{ a, b int }

//go:noinline
func crash(p *T) int { return p.b }

//go:noinline
func middle(p *T) int { return crash(p) + 1 }

func main() {
	var p *T
	if len(os.Args) > 5 {
		p = &T{1, 2}
	}
	os.Exit(middle(p))
}
