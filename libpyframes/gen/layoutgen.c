/*
 * layoutgen.c - prints layouts/py3NN.c for the CPython whose headers it is compiled with.
 *
 * Build: cc -DPy_BUILD_CORE -I$PREFIX/include/python3.N[m] -I.../internal layoutgen.c
 * (gen/regen.sh does it for every interpreter on the machine). This is the only place in
 * the tree that includes CPython headers; offsets come from offsetof() on CPython's own
 * structs, so a table cannot drift from the headers it was made from.
 */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <frameobject.h>
#include <stddef.h>
#include <stdio.h>

#if PY_VERSION_HEX < 0x03070000
/* 3.6: every struct we need is public. */
#elif PY_VERSION_HEX < 0x03080000
#include "internal/pystate.h"
#elif PY_VERSION_HEX < 0x03090000
#include "internal/pycore_pystate.h"
#elif PY_VERSION_HEX < 0x030b0000
#include "internal/pycore_interp.h"
#include "internal/pycore_runtime.h"
#else
#include "internal/pycore_code.h"
#include "internal/pycore_dict.h"
#include "internal/pycore_frame.h"
#include "internal/pycore_interp.h"
#include "internal/pycore_runtime.h"
#endif
#if PY_VERSION_HEX >= 0x030e0000
#include "internal/pycore_ceval.h" /* _PY_EVAL_PLEASE_STOP_BIT */
#include "internal/pycore_genobject.h"
#include "internal/pycore_interpframe_structs.h"
#include "internal/pycore_tstate.h"
#endif
#if PY_VERSION_HEX >= 0x030b0000 && PY_VERSION_HEX < 0x030d0000
#define NEED_OPCODE_TABLES /* _PyOpcode_Deopt and _PyOpcode_Caches, for the call sites */
#include "internal/pycore_opcode.h"
#define HAS_INLINE_CALL_CACHES 1
#elif PY_VERSION_HEX >= 0x030d0000
#define NEED_OPCODE_METADATA
#include "internal/pycore_opcode_metadata.h"
#define HAS_INLINE_CALL_CACHES 1
#endif

#if PY_VERSION_HEX < 0x030b0000
#include "opcode.h" /* the opcodes of the callers' check (print_calls) */
#endif

/* layout.h */
#define PYF_CALLS_QUIET 1
#define PYF_CALLS_ITER 2
#define PYF_CALLS_PREFIX 3
#define PYF_OP_UNITS 0x0f
#define PYF_OP_INLINE_CALL 0x10
#define PYF_OP_GENERIC 0x20

#define F(name, value) printf("    .%s = %ld,\n", name, (long)(value))
#define FS(name, sym) printf("    .%s = %s,\n", name, sym)

#ifdef HAS_INLINE_CALL_CACHES
/* The opcodes that push an inline frame (a Python call with no C in between): 3.11 calls
 * and __getitem__; 3.12 also f(*args), properties, __getattribute__ and generators driven by
 * for and by yield from / await; 3.13 also calls with keywords and class calls. */
/* clang-format off */
static const int inline_call_ops[] = {
    CALL, CALL_PY_EXACT_ARGS,
#if PY_VERSION_HEX < 0x030e0000
    BINARY_SUBSCR_GETITEM,
#else
    BINARY_OP_SUBSCR_GETITEM,
#endif
#if PY_VERSION_HEX < 0x030c0000
    CALL_ADAPTIVE, CALL_PY_WITH_DEFAULTS,
#elif PY_VERSION_HEX < 0x030d0000
    CALL_PY_WITH_DEFAULTS, CALL_BOUND_METHOD_EXACT_ARGS, CALL_FUNCTION_EX, LOAD_ATTR_PROPERTY,
    LOAD_ATTR_GETATTRIBUTE_OVERRIDDEN, FOR_ITER_GEN, SEND, SEND_GEN,
#elif PY_VERSION_HEX < 0x030e0000
    CALL_PY_GENERAL, CALL_BOUND_METHOD_EXACT_ARGS, CALL_BOUND_METHOD_GENERAL, CALL_KW,
    CALL_FUNCTION_EX, LOAD_ATTR_PROPERTY, LOAD_ATTR_GETATTRIBUTE_OVERRIDDEN, FOR_ITER_GEN, SEND,
    SEND_GEN,
    /* a class call: a shim frame (its code starts with EXIT_INIT_CHECK), then __init__ */
    CALL_ALLOC_AND_ENTER_INIT, EXIT_INIT_CHECK,
#else
    /* 3.14 folds subscripts into BINARY_OP (whose generic form calls __getitem__ through C),
     * gives CALL_KW its Python forms, and 3.15 CALL_FUNCTION_EX its own; each opcode is a
     * macro of opcode_ids.h, so a later version lacking one simply leaves it out */
    CALL_PY_GENERAL, CALL_BOUND_METHOD_EXACT_ARGS, CALL_BOUND_METHOD_GENERAL, CALL_KW,
    CALL_FUNCTION_EX, LOAD_ATTR_PROPERTY, LOAD_ATTR_GETATTRIBUTE_OVERRIDDEN, FOR_ITER_GEN, SEND,
    SEND_GEN, CALL_ALLOC_AND_ENTER_INIT, EXIT_INIT_CHECK,
#ifdef CALL_KW_PY
    CALL_KW_PY,
#endif
#ifdef CALL_KW_BOUND_METHOD
    CALL_KW_BOUND_METHOD,
#endif
#ifdef CALL_EX_PY
    CALL_EX_PY,
#endif
#ifdef SEND_ASYNC_GEN
    SEND_ASYNC_GEN,
#endif
#endif
};
/* clang-format on */
#endif

/*
 * 3.11 to 3.13: per opcode, how the bytecode is walked (layout.h: PYF_OP_*): how many code
 * units the instruction takes with its caches (0: not known, so a walk stops there: an
 * instrumented opcode, 3.12+, hides the real one and its caches, and so does 3.13's
 * ENTER_EXECUTOR; an undefined one is no instruction), whether it pushes an inline frame,
 * and whether it is the generic form of a family whose specialised forms do not all push
 * one (CALL, whose CALL_BUILTIN_O calls C). See stack.c: at_inline_call().
 */
#ifdef HAS_INLINE_CALL_CACHES
static int in_list(int op)
{
    for (size_t i = 0; i < sizeof(inline_call_ops) / sizeof(inline_call_ops[0]); i++)
        if (inline_call_ops[i] == op)
            return 1;
    return 0;
}
#endif

static void print_ops(void)
{
#ifdef HAS_INLINE_CALL_CACHES
    printf("/* clang-format off */\n");
    printf("static const uint8_t ops[256] = {\n");
    for (int op = 0; op < 256; op++) {
        int deopt = _PyOpcode_Deopt[op], value = deopt ? 1 + _PyOpcode_Caches[deopt] : 0;
#if PY_VERSION_HEX >= 0x030c0000
        if (op >= MIN_INSTRUMENTED_OPCODE)
            value = 0;
#endif
#if PY_VERSION_HEX >= 0x030d0000
        if (op == ENTER_EXECUTOR) /* tier 2 replaced the instruction */
            value = 0;
#endif
        if (value && in_list(op)) {
            value |= PYF_OP_INLINE_CALL;
            for (int other = 0; other < 256 && deopt == op; other++)
                if (other != op && _PyOpcode_Deopt[other] == op && !in_list(other))
                    value |= PYF_OP_GENERIC;
        }
        if (value)
            printf("    [%d] = %d,\n", op, value);
    }
    printf("};\n/* clang-format on */\n\n");
#endif
}

/*
 * <= 3.10: per opcode, whether a caller standing at it may be calling a Python function
 * (layout.h: PYF_CALLS_*; stack.c: caller_suspect()). The quiet ones only move values,
 * jump or return: a Python function runs under them only through a signal handler, a trace
 * function, the collector or a __del__. FOR_ITER runs Python code only for a generator, a
 * __next__ written in Python, or the function of a map() or filter(). EXTENDED_ARG is a
 * prefix: the frame runs the instruction after it. Every other opcode may call Python
 * through some dunder method and is not listed.
 */
#if PY_VERSION_HEX < 0x030b0000
/* clang-format off */
static const int quiet_ops[] = {
    NOP, POP_TOP, ROT_TWO, ROT_THREE, DUP_TOP, DUP_TOP_TWO, LOAD_FAST, LOAD_CONST, STORE_FAST,
    DELETE_FAST, LOAD_GLOBAL, LOAD_DEREF, STORE_DEREF, LOAD_CLOSURE, JUMP_ABSOLUTE, JUMP_FORWARD,
    POP_BLOCK, SETUP_FINALLY, POP_EXCEPT, RETURN_VALUE,
#ifdef ROT_FOUR
    ROT_FOUR,
#endif
#ifdef SETUP_LOOP /* <= 3.7 */
    SETUP_LOOP, SETUP_EXCEPT, BREAK_LOOP, CONTINUE_LOOP,
#endif
#ifdef IS_OP /* 3.9+ */
    IS_OP, LOAD_ASSERTION_ERROR,
#endif
};
/* clang-format on */
#endif

static void print_calls(void)
{
#if PY_VERSION_HEX < 0x030b0000
    int calls[256] = {0};

    for (size_t i = 0; i < sizeof(quiet_ops) / sizeof(quiet_ops[0]); i++)
        calls[quiet_ops[i]] = PYF_CALLS_QUIET;
    calls[FOR_ITER] = PYF_CALLS_ITER;
    calls[EXTENDED_ARG] = PYF_CALLS_PREFIX;
    printf("/* clang-format off */\n");
    printf("static const uint8_t calls[256] = {\n");
    for (int op = 0; op < 256; op++)
        if (calls[op])
            printf("    [%d] = %d,\n", op, calls[op]);
    printf("};\n/* clang-format on */\n\n");
#endif
}

/*
 * 3.13+: where _Py_DebugOffsets publishes what we read, in 64-bit words, and the word of the
 * size of the struct each offset lies in (layout.h: struct pyf_debug_map). Only the fields
 * whose meaning has stayed the same: a section's other fields are read from the table.
 */
#if PY_VERSION_HEX >= 0x030d0000
#define DW(section, member, field)                                                                 \
    printf("    {%zu, %zu, offsetof(struct pyf_layout, %s)},\n",                                   \
           offsetof(_Py_DebugOffsets, section.member) / 8,                                         \
           offsetof(_Py_DebugOffsets, section.size) / 8, field)
#define WORD(member) (offsetof(_Py_DebugOffsets, member) / 8)
#endif

static void print_debug_map(void)
{
#if PY_VERSION_HEX >= 0x030d0000
    printf("static const struct pyf_debug_field debug_fields[] = {\n");
    DW(runtime_state, interpreters_head, "rt_interp_head");
    DW(interpreter_state, id, "is_id");
    DW(interpreter_state, next, "is_next");
    DW(interpreter_state, threads_head, "is_tstate_head");
    DW(interpreter_state, imports_modules, "is_modules");
    DW(interpreter_state, ceval_gil, "is_gil");
    DW(thread_state, next, "ts_next");
    DW(thread_state, interp, "ts_interp");
    DW(thread_state, current_frame, "ts_frame");
    DW(thread_state, thread_id, "ts_thread_id");
    DW(thread_state, native_thread_id, "ts_native_thread_id");
    DW(interpreter_frame, previous, "fr_back");
    DW(interpreter_frame, executable, "fr_code");
    DW(interpreter_frame, instr_ptr, "fr_lasti");
    DW(interpreter_frame, localsplus, "fr_localsplus");
    DW(interpreter_frame, localsplus, "fr_size");
    DW(interpreter_frame, owner, "fr_owner");
    DW(code_object, filename, "co_filename");
    DW(code_object, name, "co_name");
    DW(code_object, qualname, "co_qualname");
    DW(code_object, linetable, "co_linetable");
    DW(code_object, firstlineno, "co_firstlineno");
    DW(code_object, argcount, "co_argcount");
    DW(code_object, localsplusnames, "co_localsplusnames");
    DW(code_object, localspluskinds, "co_localspluskinds");
    DW(code_object, co_code_adaptive, "co_code_adaptive");
    DW(pyobject, ob_type, "ob_type");
    DW(type_object, tp_name, "tp_name");
    DW(type_object, tp_flags, "tp_flags");
    DW(tuple_object, ob_item, "tuple_items");
    DW(tuple_object, ob_size, "var_size");
    DW(list_object, ob_item, "list_items");
    DW(dict_object, ma_keys, "dict_keys");
    DW(dict_object, ma_values, "dict_values");
#if PY_VERSION_HEX >= 0x030e0000
    DW(set_object, used, "set_used");
    DW(set_object, table, "set_table");
    DW(set_object, mask, "set_mask");
#endif
    DW(float_object, ob_fval, "float_value");
    DW(long_object, ob_digit, "long_digits");
    DW(bytes_object, ob_sval, "bytes_data");
    DW(unicode_object, state, "str_state");
    DW(unicode_object, length, "str_length");
    DW(unicode_object, asciiobject_size, "str_ascii_data");
    printf("};\n\n");
    printf("static const struct pyf_debug_map debug_map = {\n");
    printf("    .n_words = %zu,\n", sizeof(_Py_DebugOffsets) / 8);
    printf("    .version = %zu,\n", WORD(version));
    printf("    .free_threaded = %zu,\n", WORD(free_threaded));
    printf("    .gil_state = %zu,\n", WORD(interpreter_state.gil_runtime_state));
    printf("    .gil_locked = %zu,\n", WORD(interpreter_state.gil_runtime_state_locked));
    printf("    .gil_holder = %zu,\n", WORD(interpreter_state.gil_runtime_state_holder));
    printf("    .is_gc = %zu,\n", WORD(interpreter_state.gc));
    printf("    .gc_collecting = %zu,\n", WORD(gc.collecting));
    printf("    .is_size = %zu,\n", WORD(interpreter_state.size));
    printf("    .ts_size = %zu,\n", WORD(thread_state.size));
#if PY_VERSION_HEX >= 0x030e0000
    printf("    .eval_breaker = %zu,\n", WORD(debugger_support.eval_breaker));
    printf("    .debugger_support = %zu,\n", WORD(debugger_support.remote_debugger_support));
    printf("    .debugger_pending = %zu,\n", WORD(debugger_support.debugger_pending_call));
    printf("    .debugger_script = %zu,\n", WORD(debugger_support.debugger_script_path));
    printf("    .debugger_script_size = %zu,\n", WORD(debugger_support.debugger_script_path_size));
    printf("    .remote_debug = %zu,\n", WORD(debugger_support.remote_debugging_enabled));
#endif
    printf("    .n_fields = sizeof(debug_fields) / sizeof(debug_fields[0]),\n");
    printf("    .fields = debug_fields,\n};\n\n");
#endif
}

int main(void)
{
    int minor = PY_MINOR_VERSION;

    printf("/* Generated by libpyframes/gen/layoutgen.c from the CPython %s headers. "
           "Do not edit. */\n",
           PY_VERSION);
    printf("#include \"../layout.h\"\n\n");
    print_ops();
    print_calls();
    print_debug_map();
    printf("const struct pyf_layout pyf_layout_3%02d = {\n", minor);
    printf("    .version = PYF_VER(3, %d),\n", minor);

#if PY_VERSION_HEX < 0x030b0000
    FS("frame_model", "PYF_FRAME_OBJECT");
#else
    FS("frame_model", "PYF_FRAME_INTERP");
#endif
#if PY_VERSION_HEX < 0x030a0000
    FS("line_format", "PYF_LINE_LNOTAB");
#elif PY_VERSION_HEX < 0x030b0000
    FS("line_format", "PYF_LINE_LINETABLE");
#else
    FS("line_format", "PYF_LINE_LOCATIONS");
#endif
#if PY_VERSION_HEX < 0x030c0000
    FS("long_format", "PYF_LONG_OBSIZE");
#else
    FS("long_format", "PYF_LONG_LVTAG");
#endif
#if PY_VERSION_HEX < 0x03070000
    FS("gil_model", "PYF_GIL_CURRENT_SYM");
#elif PY_VERSION_HEX < 0x030c0000
    FS("gil_model", "PYF_GIL_RUNTIME");
#else
    FS("gil_model", "PYF_GIL_INTERP");
#endif

    /* _PyRuntimeState */
#if PY_VERSION_HEX < 0x03070000
    F("rt_interp_head", -1);
    F("rt_tstate_current", -1);
#else
    F("rt_interp_head", offsetof(_PyRuntimeState, interpreters.head));
#if PY_VERSION_HEX < 0x030c0000
    F("rt_tstate_current", offsetof(_PyRuntimeState, gilstate.tstate_current));
#else
    F("rt_tstate_current", -1);
#endif
#endif

    /* the collector's "collecting" flag: in the runtime (3.7, 3.8), per interpreter (3.9+);
     * 3.6 keeps it in a static of gcmodule.c */
#if PY_VERSION_HEX >= 0x03070000 && PY_VERSION_HEX < 0x03090000
    F("rt_gc_collecting", offsetof(_PyRuntimeState, gc.collecting));
    F("is_gc_collecting", -1);
#elif PY_VERSION_HEX >= 0x03090000
    F("rt_gc_collecting", -1);
    F("is_gc_collecting", offsetof(PyInterpreterState, gc.collecting));
#else
    F("rt_gc_collecting", -1);
    F("is_gc_collecting", -1);
#endif

    /* sys.modules */
#if PY_VERSION_HEX < 0x030c0000
    F("is_modules", offsetof(PyInterpreterState, modules));
#else
    F("is_modules", offsetof(PyInterpreterState, imports.modules));
#endif
    /* PyInterpreterState */
    F("is_next", offsetof(PyInterpreterState, next));
#if PY_VERSION_HEX < 0x03070000
    F("is_id", -1);
#else
    F("is_id", offsetof(PyInterpreterState, id));
#endif
#if PY_VERSION_HEX < 0x030b0000
    F("is_tstate_head", offsetof(PyInterpreterState, tstate_head));
#else
    F("is_tstate_head", offsetof(PyInterpreterState, threads.head));
#endif
#if PY_VERSION_HEX < 0x030c0000
    F("is_gil", -1);
    F("gil_last_holder", -1);
    F("gil_locked", -1);
#else
    F("is_gil", offsetof(PyInterpreterState, ceval.gil));
    F("gil_last_holder", offsetof(struct _gil_runtime_state, last_holder));
    F("gil_locked", offsetof(struct _gil_runtime_state, locked));
#endif

    /* PyThreadState */
    F("ts_next", offsetof(PyThreadState, next));
    F("ts_interp", offsetof(PyThreadState, interp));
#if PY_VERSION_HEX < 0x030b0000
    F("ts_frame", offsetof(PyThreadState, frame));
    F("ts_cframe_frame", -1);
#elif PY_VERSION_HEX < 0x030d0000
    F("ts_frame", offsetof(PyThreadState, cframe));
    F("ts_cframe_frame", offsetof(_PyCFrame, current_frame));
#else
    F("ts_frame", offsetof(PyThreadState, current_frame));
    F("ts_cframe_frame", -1);
#endif
    F("ts_thread_id", offsetof(PyThreadState, thread_id));
#if PY_VERSION_HEX < 0x030b0000
    F("ts_native_thread_id", -1);
#else
    F("ts_native_thread_id", offsetof(PyThreadState, native_thread_id));
#endif
    F("ts_size", sizeof(PyThreadState));

    /* frames */
#if PY_VERSION_HEX < 0x030b0000
    F("fr_back", offsetof(PyFrameObject, f_back));
    F("fr_code", offsetof(PyFrameObject, f_code));
    F("fr_lasti", offsetof(PyFrameObject, f_lasti));
    F("fr_localsplus", offsetof(PyFrameObject, f_localsplus));
    F("fr_owner", -1);
    F("fr_size", offsetof(PyFrameObject, f_localsplus));
    F("fr_lasti_scale", PY_VERSION_HEX < 0x030a0000 ? 1 : 2);
    F("fr_owner_shim", -1);
    F("stackref_tag_bits", 0);
    F("stackref_int_tag", -1);
    F("fr_state", offsetof(PyObject, ob_refcnt)); /* 0: returned (a zombie or free frame) */
    FS("fr_state_model", "PYF_STATE_REFCNT");
    F("fr_is_entry", -1);
    /* every frame on a thread's stack is running (its callers too): a frame being made from
     * a free or zombie one, or one that returned, is not */
#if PY_VERSION_HEX < 0x030a0000
    F("fr_running", offsetof(PyFrameObject, f_executing));
    F("fr_running_value", 1);
#else
    F("fr_running", offsetof(PyFrameObject, f_state));
    F("fr_running_value", FRAME_EXECUTING);
#endif
    FS("calls", "calls");
#else
    F("fr_running", -1);
    F("fr_running_value", 0);
    F("fr_back", offsetof(_PyInterpreterFrame, previous));
#if PY_VERSION_HEX < 0x030d0000
    F("fr_code", offsetof(_PyInterpreterFrame, f_code));
    F("fr_lasti", offsetof(_PyInterpreterFrame, prev_instr));
#else
    F("fr_code", offsetof(_PyInterpreterFrame, f_executable));
    F("fr_lasti", offsetof(_PyInterpreterFrame, instr_ptr));
#endif
    F("fr_localsplus", offsetof(_PyInterpreterFrame, localsplus));
    F("fr_owner", offsetof(_PyInterpreterFrame, owner));
    F("fr_size", offsetof(_PyInterpreterFrame, localsplus));
    F("fr_lasti_scale", 2);
#if PY_VERSION_HEX < 0x030e0000
    F("stackref_tag_bits", 0);
    F("stackref_int_tag", -1);
#else
    F("stackref_tag_bits", Py_TAG_BITS);
    F("stackref_int_tag", Py_INT_TAG);
#endif
#if PY_VERSION_HEX < 0x030c0000
    F("fr_owner_shim", -1);
    F("fr_state", -1); /* 3.11 leaves stacktop as last saved: no executing marker */
    FS("fr_state_model", "PYF_STATE_NONE");
    F("fr_is_entry", offsetof(_PyInterpreterFrame, is_entry));
    FS("ops", "ops");
#elif PY_VERSION_HEX < 0x030e0000
    F("fr_owner_shim", FRAME_OWNED_BY_CSTACK);
    F("fr_state", offsetof(_PyInterpreterFrame, stacktop)); /* -1: executing */
    FS("fr_state_model", "PYF_STATE_STACKTOP");
    F("fr_is_entry", -1); /* entry frames are marked by a shim frame instead */
#ifdef HAS_INLINE_CALL_CACHES
    FS("ops", "ops");
#endif
#else
    /* 3.14's stackpointer is cleared while the frame executes in debug builds only */
    F("fr_owner_shim", FRAME_OWNED_BY_INTERPRETER);
    F("fr_state", -1);
    FS("fr_state_model", "PYF_STATE_NONE");
    F("fr_is_entry", -1);
#ifdef HAS_INLINE_CALL_CACHES
    FS("ops", "ops");
#endif
#endif
#endif

    /* PyCodeObject */
    F("co_argcount", offsetof(PyCodeObject, co_argcount));
#if PY_VERSION_HEX < 0x030b0000
    F("co_nlocals", offsetof(PyCodeObject, co_nlocals));
    F("co_nlocalsplus", -1);
#else
    F("co_nlocals", offsetof(PyCodeObject, co_nlocals));
    F("co_nlocalsplus", offsetof(PyCodeObject, co_nlocalsplus));
#endif
    F("co_firstlineno", offsetof(PyCodeObject, co_firstlineno));
    F("co_flags", offsetof(PyCodeObject, co_flags));
    F("co_filename", offsetof(PyCodeObject, co_filename));
    F("co_name", offsetof(PyCodeObject, co_name));
#if PY_VERSION_HEX < 0x030b0000
    F("co_qualname", -1);
#else
    F("co_qualname", offsetof(PyCodeObject, co_qualname));
#endif
#if PY_VERSION_HEX < 0x030a0000
    F("co_linetable", offsetof(PyCodeObject, co_lnotab));
#else
    F("co_linetable", offsetof(PyCodeObject, co_linetable));
#endif
#if PY_VERSION_HEX < 0x030b0000
    F("co_code", offsetof(PyCodeObject, co_code));
    F("co_code_adaptive", -1);
    F("co_varnames", offsetof(PyCodeObject, co_varnames));
    F("co_cellvars", offsetof(PyCodeObject, co_cellvars));
    F("co_freevars", offsetof(PyCodeObject, co_freevars));
    F("co_localsplusnames", -1);
    F("co_localspluskinds", -1);
    F("co_size", sizeof(PyCodeObject));
#else
    F("co_code", -1);
    F("co_code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
    F("co_varnames", -1);
    F("co_cellvars", -1);
    F("co_freevars", -1);
    F("co_localsplusnames", offsetof(PyCodeObject, co_localsplusnames));
    F("co_localspluskinds", offsetof(PyCodeObject, co_localspluskinds));
    F("co_size", offsetof(PyCodeObject, co_code_adaptive));
#endif

    /* objects */
    F("ob_type", offsetof(PyObject, ob_type));
    F("var_size", offsetof(PyVarObject, ob_size));
    F("tp_name", offsetof(PyTypeObject, tp_name));
    F("tp_flags", offsetof(PyTypeObject, tp_flags));
    /* instance attributes (thread names: threading.Thread._name): where an object's __dict__
     * or its values are */
    F("tp_basicsize", offsetof(PyTypeObject, tp_basicsize));
    F("tp_dictoffset", offsetof(PyTypeObject, tp_dictoffset));
    F("ht_cached_keys", offsetof(PyHeapTypeObject, ht_cached_keys));
    /* PyModuleObject is private to Objects/moduleobject.c before 3.10; md_dict has always
     * followed the object header */
    F("module_dict", sizeof(PyObject));
#if PY_VERSION_HEX < 0x030b0000
    FS("attrs_model", "PYF_ATTRS_DICTOFFSET");
#elif PY_VERSION_HEX < 0x030c0000
    FS("attrs_model", "PYF_ATTRS_MANAGED_311");
#elif PY_VERSION_HEX < 0x030d0000
    FS("attrs_model", "PYF_ATTRS_DICT_OR_VALUES");
#else
    FS("attrs_model", "PYF_ATTRS_INLINE_VALUES");
#endif
    F("tuple_items", offsetof(PyTupleObject, ob_item));
    F("bytes_data", offsetof(PyBytesObject, ob_sval));
    F("float_value", offsetof(PyFloatObject, ob_fval));
    /* containers, rendered as locals (pyrepr.c) */
    F("list_items", offsetof(PyListObject, ob_item));
    F("set_used", offsetof(PySetObject, used));
    F("set_mask", offsetof(PySetObject, mask));
    F("set_table", offsetof(PySetObject, table));
    F("set_entry_size", sizeof(setentry));
    F("dict_used", offsetof(PyDictObject, ma_used));
    F("dict_keys", offsetof(PyDictObject, ma_keys));
    F("dict_values", offsetof(PyDictObject, ma_values));
#if PY_VERSION_HEX < 0x030b0000
    /* struct _dictkeysobject is private to Objects/dict-common.h before 3.11, and the same
     * from 3.6 to 3.10: dk_refcnt, dk_size, dk_lookup, dk_usable, dk_nentries, dk_indices;
     * the entries (hash, key, value) follow dk_size indices of 1, 2, 4 or 8 bytes; a split
     * table's values are a plain array */
    FS("dict_keys_model", "PYF_DICT_KEYS_SIZE");
    F("dk_size", 8);
    F("dk_log2_size", -1);
    F("dk_log2_index_bytes", -1);
    F("dk_kind", -1);
    F("dk_nentries", 32);
    F("dk_indices", 40);
    F("dict_values_array", 0);
#else
    FS("dict_keys_model", "PYF_DICT_KEYS_LOG2");
    F("dk_size", -1);
    F("dk_log2_size", offsetof(PyDictKeysObject, dk_log2_size));
    F("dk_log2_index_bytes", offsetof(PyDictKeysObject, dk_log2_index_bytes));
    F("dk_kind", offsetof(PyDictKeysObject, dk_kind));
    F("dk_nentries", offsetof(PyDictKeysObject, dk_nentries));
    F("dk_indices", offsetof(PyDictKeysObject, dk_indices));
    F("dict_values_array", offsetof(PyDictValues, values));
#endif
#if PY_VERSION_HEX < 0x030c0000
    F("long_digits", offsetof(struct _longobject, ob_digit));
#else
    F("long_digits", offsetof(struct _longobject, long_value.ob_digit));
#endif
    F("long_digit_bits", PyLong_SHIFT);
    F("cell_ref", offsetof(PyCellObject, ob_ref));
    F("str_length", offsetof(PyASCIIObject, length));
    F("str_state", offsetof(PyASCIIObject, state));
    F("str_ascii_data", sizeof(PyASCIIObject));
    F("str_compact_data", sizeof(PyCompactUnicodeObject));
#if PY_VERSION_HEX >= 0x030e0000
    F("ts_eval_breaker", offsetof(PyThreadState, eval_breaker));
    F("ts_debugger_pending",
      offsetof(PyThreadState, remote_debugger_support.debugger_pending_call));
    F("ts_debugger_script", offsetof(PyThreadState, remote_debugger_support.debugger_script_path));
    F("debugger_script_size", _Py_MAX_SCRIPT_PATH_SIZE);
    F("is_remote_debug", offsetof(PyInterpreterState, config.remote_debug));
    F("eval_stop_bit", _PY_EVAL_PLEASE_STOP_BIT);
#else
    F("ts_eval_breaker", -1);
    F("ts_debugger_pending", -1);
    F("ts_debugger_script", -1);
    F("debugger_script_size", -1);
    F("is_remote_debug", -1);
    F("eval_stop_bit", 0);
#endif
    /* generators and coroutines: where a suspended one's frame is, whether it is suspended,
     * and the top of its value stack (what it awaits) */
#if PY_VERSION_HEX < 0x030b0000
    F("gen_frame", offsetof(PyGenObject, gi_frame));
    F("gen_iframe", -1);
    F("gen_state", -1);
    F("gen_created", 0);
    F("gen_suspended_lo", 0);
    F("gen_suspended_hi", 0);
    F("gen_executing", 0);
#else
    F("gen_frame", -1);
    F("gen_iframe", offsetof(PyGenObject, gi_iframe));
    F("gen_state", offsetof(PyGenObject, gi_frame_state));
    F("gen_created", FRAME_CREATED);
    F("gen_suspended_lo", FRAME_SUSPENDED);
#if PY_VERSION_HEX >= 0x030f0000
    F("gen_suspended_hi", FRAME_SUSPENDED_YIELD_FROM_LOCKED);
#elif PY_VERSION_HEX >= 0x030d0000
    F("gen_suspended_hi", FRAME_SUSPENDED_YIELD_FROM);
#else
    F("gen_suspended_hi", FRAME_SUSPENDED);
#endif
    F("gen_executing", FRAME_EXECUTING);
#endif
#if PY_VERSION_HEX < 0x030a0000
    F("fr_stacktop", offsetof(PyFrameObject, f_stacktop));
#else
    F("fr_stacktop", -1);
#endif
#if PY_VERSION_HEX >= 0x030a0000 && PY_VERSION_HEX < 0x030b0000
    F("fr_valuestack", offsetof(PyFrameObject, f_valuestack));
    F("fr_stackdepth", offsetof(PyFrameObject, f_stackdepth));
    F("fr_suspended", FRAME_SUSPENDED);
    F("fr_created", FRAME_CREATED);
#else
    F("fr_valuestack", -1);
    F("fr_stackdepth", -1);
    F("fr_suspended", 0);
    F("fr_created", 0);
#endif
#if PY_VERSION_HEX >= 0x030b0000 && PY_VERSION_HEX < 0x030e0000
    F("fr_stack_index", offsetof(_PyInterpreterFrame, stacktop));
#else
    F("fr_stack_index", -1);
#endif
    /* the slot below the top holding what a suspended generator awaits: _PyGen_yf() peeks at
     * depth 1 until 3.14, at depth 2 from 3.15 (SEND leaves a NULL above the receiver) */
#if PY_VERSION_HEX >= 0x030f0000
    F("gen_yf_depth", 2);
#else
    F("gen_yf_depth", 1);
#endif
#if PY_VERSION_HEX >= 0x030e0000
    F("fr_stackpointer", offsetof(_PyInterpreterFrame, stackpointer));
    F("ts_asyncio_tasks", offsetof(_PyThreadStateImpl, asyncio_tasks_head));
    F("ts_asyncio_running_task", offsetof(_PyThreadStateImpl, asyncio_running_task));
    F("is_asyncio_tasks", offsetof(PyInterpreterState, asyncio_tasks_head));
#else
    F("fr_stackpointer", -1);
    F("ts_asyncio_tasks", -1);
    F("ts_asyncio_running_task", -1);
    F("is_asyncio_tasks", -1);
#endif
#if PY_VERSION_HEX >= 0x030d0000
    FS("debug_map", "&debug_map");
#endif
    printf("};\n");
    return 0;
}
