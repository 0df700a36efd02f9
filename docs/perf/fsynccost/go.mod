module github.com/axsched/ax/docs/perf/fsynccost

go 1.26.0
