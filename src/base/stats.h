/*
 * stats.h — small statistics over timings (the hardware benchmark, the
 * speculative decoder's cost calibration): the median.
 *
 * Invariant: stats_median sorts v in place (ascending) and returns the middle
 * value, or the mean of the two middle values for an even n (n >= 1).
 */
#ifndef KVI_STATS_H
#define KVI_STATS_H

double stats_median(double *v, int n);

#endif
