/*
 * pattern.h - the command-line patterns users give (`attach --match`, `detach --match`,
 * `cluster attach --match`): POSIX extended regular expressions, bounded before glibc's
 * regcomp sees them. glibc unrolls a counted repetition into that many copies of its atom, so
 * "((a{1,100}){1,100}){1,100}" (26 bytes) is a million nodes: 1.2 GB and a second to compile,
 * and one more level 8 GB and 31 s. A pattern is measured as regcomp would unroll it and
 * refused past PATTERN_NODES_MAX; back-references (exponential to match) are refused too.
 * Threads: any. Memory: a compiled pattern is the caller's (regfree). Failure: -EINVAL, with
 * why in @why.
 */
#ifndef PROBED_PATTERN_H
#define PROBED_PATTERN_H

#include <regex.h>
#include <stddef.h>

#define PATTERN_BYTES_MAX 256  /* the pattern's text */
#define PATTERN_NODES_MAX 2048 /* its atoms once repetitions are unrolled */

/* Whether @re is a pattern we compile: 0, or -EINVAL. Linear in its length; nothing compiled. */
int pattern_check(const char *re, char *why, size_t why_size);
/* pattern_check(), then regcomp(REG_EXTENDED | REG_NOSUB) into @ret (regfree it on 0). */
int pattern_compile(regex_t *ret, const char *re, char *why, size_t why_size);

#endif
