// gmp-demoapp-automaxprocs is the demo service with go.uber.org/automaxprocs: before main,
// it sets GOMAXPROCS to max(1, floor(quota/period)) of the cgroup it started in (unless
// GOMAXPROCS is set in the environment) and logs that on stderr. Setting GOMAXPROCS also
// turns off the runtime's own updates (Go >= 1.25), so the value stays for the run.
package main

import (
	_ "go.uber.org/automaxprocs"

	"github.com/gmpanalysis/gmpanalysis/collectors/demoapp"
)

func main() { demoapp.Main() }
