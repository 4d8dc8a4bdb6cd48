module github.com/gmpanalysis/gmpanalysis/collectors/demoapp

go 1.24

require golang.org/x/sys v0.31.0
