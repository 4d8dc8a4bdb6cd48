module github.com/gmpanalysis/gmpanalysis/collectors/variants/go124

go 1.24

require github.com/gmpanalysis/gmpanalysis/collectors/demoapp v0.0.0

require golang.org/x/sys v0.31.0 // indirect

replace github.com/gmpanalysis/gmpanalysis/collectors/demoapp => ../../demoapp
