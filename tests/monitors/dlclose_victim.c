// dlclose_victim.c: a library loaded and unloaded by the tests of what
// dlclose releases (the `dlclose` row of the invalidation matrix,
// dlclose_test). Its writable segment has a file-backed part (.data) and a
// large anonymous part (.bss).

// 4 MiB of .bss, page-aligned: the buffer lies wholly in the anonymous part
// of the segment, past the page where .data ends.
__attribute__((aligned(4096))) char dlclose_victim_buffer[4 << 20];

// .data: the first bytes of .bss share its last page, which is file-backed.
int dlclose_victim_data = 1;
