module github.com/axsched/ax/clients/go

go 1.26

require go.opentelemetry.io/otel/trace v1.41.0

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.opentelemetry.io/otel v1.41.0 // indirect
)
