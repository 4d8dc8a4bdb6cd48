module github.com/gmpanalysis/gmpanalysis/collectors

go 1.26.0

require (
	github.com/gmpanalysis/gmpanalysis/collectors/demoapp v0.0.0
	github.com/tsenart/vegeta/v12 v12.12.0
	golang.org/x/exp v0.0.0-20261014143641-f0251eb4aa3e
	golang.org/x/sys v0.49.0
)

require (
	github.com/influxdata/tdigest v0.0.1 // indirect
	github.com/josharian/intern v1.0.0 // indirect
	github.com/mailru/easyjson v0.7.7 // indirect
	github.com/rs/dnscache v0.0.0-20230804202142-fc85eb664529 // indirect
	golang.org/x/net v0.27.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.16.0 // indirect
)

// the demo app is its own module (go 1.24) so that variants/ can build it under other
// GOMAXPROCS rules; this module builds it as cmd/gmp-demoapp
replace github.com/gmpanalysis/gmpanalysis/collectors/demoapp => ./demoapp
