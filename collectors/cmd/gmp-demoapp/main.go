// gmp-demoapp is the demo service (package demoapp) built by the collectors module, whose
// go line gives it the current runtime's GOMAXPROCS defaults.
package main

import "github.com/gmpanalysis/gmpanalysis/collectors/demoapp"

func main() { demoapp.Main() }
