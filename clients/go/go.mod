module github.com/axsched/ax/clients/go

go 1.26
