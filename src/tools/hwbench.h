/*
 * hwbench.h — internals of the machine-limit benchmark (hwbench.c) that the
 * tests reach: the read loops behind kvi_hw_bench()'s read bandwidth.
 *
 * Every read method m returns the same checksum of n bytes as hw_read_ref(): the
 * sum mod 2^64 of the little-endian u64 words of the first n / 8 * 8 bytes plus the
 * trailing bytes one by one. A method reads with the instructions of its ISA, as
 * S interleaved streams with or without software prefetch (its name says which).
 */
#ifndef KVI_HWBENCH_H
#define KVI_HWBENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

uint64_t hw_read_ref(const uint8_t *p, size_t n); /* scalar reference */
int hw_read_n_methods(void);
const char *hw_read_method_name(int m); /* NULL when m is out of range */
bool hw_read_method_supported(int m);   /* this CPU has the method's ISA */
/* Checksum of p[0..n) by method m (any alignment); 0 for an unsupported m. */
uint64_t hw_read_sum(int m, const uint8_t *p, size_t n);

#endif
