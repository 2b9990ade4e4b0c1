module github.com/ustack/ustack

go 1.26.8
