/* noop_lib.c - a library that does nothing when loaded: what reinject loads into a target
 * again and again, to test the injection itself (tests/functional/test_eval.py). */
__attribute__((constructor)) static void noop_loaded(void)
{
}
