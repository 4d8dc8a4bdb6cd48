// gmp-demoapp-go124 is the demo service built from a module whose go line is 1.24: a newer
// toolchain then keeps Go 1.24's runtime defaults (DefaultGODEBUG containermaxprocs=0,
// updatemaxprocs=0), so GOMAXPROCS is the number of CPUs it may run on and the
// container's CPU limit is ignored, as for a service not yet moved to a newer go line.
package main

import "github.com/gmpanalysis/gmpanalysis/collectors/demoapp"

func main() { demoapp.Main() }
