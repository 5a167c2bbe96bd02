/*
 * spin_lib.c - a native library for test_native.py: spin_for() loops in native code for as
 * long as asked, through a static function, so a mixed backtrace finds the library's frames
 * under the Python caller. native_spin.py loads a copy and deletes the file.
 */
volatile unsigned long spin_sink;

__attribute__((noinline)) static unsigned long mix(unsigned long i)
{
    return i * 2654435761u;
}

void spin_for(unsigned long n);

void spin_for(unsigned long n)
{
    for (unsigned long i = 0; i < n; i++)
        spin_sink += mix(i);
}
