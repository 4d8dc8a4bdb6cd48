module github.com/gmpanalysis/gmpanalysis/collectors/variants/automaxprocs

go 1.26.0

require (
	github.com/gmpanalysis/gmpanalysis/collectors/demoapp v0.0.0
	go.uber.org/automaxprocs v1.6.0
)

require golang.org/x/sys v0.31.0 // indirect

replace github.com/gmpanalysis/gmpanalysis/collectors/demoapp => ../../demoapp
