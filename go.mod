module github.com/ustack/ustack

go 1.26.8

require (
	github.com/go-delve/delve v1.27.2 // indirect
	github.com/ianlancetaylor/demangle v0.0.0-20260724033716-83e58baca724 // indirect
	golang.org/x/sys v0.46.0 // indirect
)
