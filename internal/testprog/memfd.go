package testprog

// MemfdExecSrc is a C program that runs argv[1], with the arguments after
// it, from a memfd named "memfd-prog", as container runtimes (runc) and
// some agents run theirs: the program's mappings are named
// "/memfd:memfd-prog (deleted)" in its maps and its core's NT_FILE.
const MemfdExecSrc = `#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
extern char **environ;
int main(int argc, char **argv) {
	int in = open(argv[1], O_RDONLY), fd = memfd_create("memfd-prog", 0);
	char buf[65536];
	ssize_t n;
	if (in < 0 || fd < 0) { perror("open"); return 1; }
	while ((n = read(in, buf, sizeof buf)) > 0)
		if (write(fd, buf, n) != n) { perror("write"); return 1; }
	fexecve(fd, argv + 1, environ);
	perror("fexecve");
	return 1;
}
`
