module github.com/ustack/ustack/examples/library

go 1.26.8

require (
	github.com/stretchr/testify v1.12.1
	github.com/ustack/ustack v0.0.0
	golang.org/x/sys v0.46.0
)

require (
	github.com/google/pprof v0.0.0-20261105003125-4bf881d7fb0b // indirect
	github.com/ianlancetaylor/demangle v0.0.0-20260724033716-83e58baca724 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/ulikunitz/xz v0.5.15 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)

replace github.com/ustack/ustack => ../..
