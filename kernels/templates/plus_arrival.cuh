// plus_arrival.cuh: the last CTA of a launch to arrive at a 64-bit arrival word (the one-launch GEMM + row
// program's row finish, gemm_hooks.cuh; the dynamic range's combine, dynamic_range.cuh). The word holds
// (tag << 16) | count, the tag being this launch's grid id (never 0): a word left by another launch, or any
// value the scratch held before, counts as 0, and the last arrival resets it to 0 for the next launch, so
// the scratch needs no clearing and concurrent launches (each with its own scratch) never meet. At most
// 0xFFFF arrivals; call it from one thread per CTA after a __threadfence of the stores it publishes.
#pragma once

PLUS_DEV bool plus_last_arrival(unsigned long long* word, unsigned arrivals) {
  unsigned long long id;
  asm volatile("mov.u64 %0, %%gridid;" : "=l"(id));
  const unsigned long long tag = id % 0xFFFFFFFFFFFEull + 1ull;   // 1 .. 2^48 - 2: never 0 (reset) nor all ones
  unsigned long long cur = 0ull;
  for (;;) {
    const unsigned long long next = ((cur >> 16) == tag ? cur : tag << 16) + 1ull;
    const unsigned long long seen = atomicCAS(word, cur, next);
    if (seen == cur) {
      cur = next;
      break;
    }
    cur = seen;
  }
  if ((cur & 0xFFFFull) != arrivals) return false;
  *word = 0ull;               // every arrival of this launch has counted: ready for the next launch
  return true;
}
