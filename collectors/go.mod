module github.com/gmpanalysis/gmpanalysis/collectors

go 1.26.0

require (
	github.com/gmpanalysis/gmpanalysis/collectors/demoapp v0.0.0
	github.com/prometheus/client_golang v1.25.0
	github.com/tsenart/vegeta/v12 v12.12.0
	golang.org/x/exp v0.0.0-20261014143641-f0251eb4aa3e
	golang.org/x/sys v0.49.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/influxdata/tdigest v0.0.1 // indirect
	github.com/josharian/intern v1.0.0 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/mailru/easyjson v0.7.7 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/rs/dnscache v0.0.0-20230804202142-fc85eb664529 // indirect
	golang.org/x/net v0.59.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

// the demo app is its own module (go 1.24) so that variants/ can build it under other
// GOMAXPROCS rules; this module builds it as cmd/gmp-demoapp
replace github.com/gmpanalysis/gmpanalysis/collectors/demoapp => ./demoapp
