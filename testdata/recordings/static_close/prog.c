/* The program of resolve's Example recording: one close(2) under three
   calls, recorded at syscalls:sys_enter_close with a DWARF stack copy. */
#include <fcntl.h>
#include <unistd.h>

__attribute__((noinline)) void leaf(void) { close(open("/dev/null", O_RDONLY)); __asm__ volatile(""); }
__attribute__((noinline)) void middle(void) { leaf(); __asm__ volatile(""); }
__attribute__((noinline)) void outer(void) { middle(); __asm__ volatile(""); }
int main(void) { outer(); return 0; }
