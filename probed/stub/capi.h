/*
 * capi.h - the part of CPython's C API the stub uses, as pointers stub.c resolves at run time
 * with dlsym: the stub links against no libpython, so one build serves every CPython from 3.6
 * on. Only functions and data every 3.6+ exports are here, and no struct layout but
 * PyMethodDef's (unchanged since 2.x, part of the stable ABI).
 *
 * Every call needs the GIL held by the calling thread, except PyGILState_Ensure and the
 * functions that take the GIL back (PyEval_RestoreThread).
 */
#ifndef PROBED_STUB_CAPI_H
#define PROBED_STUB_CAPI_H

#include <sys/types.h>

typedef struct _object PyObject;
typedef struct _ts PyThreadState;
typedef PyObject *(*py_cfunction_fn)(PyObject *self, PyObject *args);

struct py_method_def { /* PyMethodDef */
    const char *name;
    py_cfunction_fn fn;
    int flags;
    const char *doc;
};

#define PY_METH_VARARGS 0x0001
#define PY_METH_NOARGS 0x0004
#define PY_FILE_INPUT 257 /* Py_file_input in every version */

struct capi {
    int (*Py_IsInitialized)(void);
    int (*PyGILState_Ensure)(void);
    void (*PyGILState_Release)(int);
    int (*Py_AddPendingCall)(int (*)(void *), void *);
    PyThreadState *(*PyEval_SaveThread)(void);
    void (*PyEval_RestoreThread)(PyThreadState *);
    PyObject *(*PyRun_StringFlags)(const char *, int, PyObject *, PyObject *, void *);
    PyObject *(*PyDict_New)(void);
    PyObject *(*PyDict_GetItem)(PyObject *, PyObject *);
    PyObject *(*PyDict_GetItemString)(PyObject *, const char *);
    int (*PyDict_SetItem)(PyObject *, PyObject *, PyObject *);
    int (*PyDict_SetItemString)(PyObject *, const char *, PyObject *);
    void (*PyDict_Clear)(PyObject *);
    PyObject *(*PyEval_GetBuiltins)(void);
    PyObject *(*PyImport_GetModuleDict)(void);
    PyObject *(*PyModule_New)(const char *);
    PyObject *(*PyCFunction_NewEx)(struct py_method_def *, PyObject *, PyObject *);
    PyObject *(*PyUnicode_FromStringAndSize)(const char *, ssize_t);
    const char *(*PyUnicode_AsUTF8AndSize)(PyObject *, ssize_t *);
    PyObject *(*PyLong_FromUnsignedLong)(unsigned long);
    PyObject *(*PyLong_FromLongLong)(long long);
    long long (*PyLong_AsLongLong)(PyObject *);
    PyObject *(*PyLong_FromVoidPtr)(void *);
    PyObject *(*PyTuple_New)(ssize_t);
    int (*PyTuple_SetItem)(PyObject *, ssize_t, PyObject *);
    PyObject *(*PyTuple_GetItem)(PyObject *, ssize_t);
    ssize_t (*PyTuple_Size)(PyObject *);
    PyObject *(*PyList_GetItem)(PyObject *, ssize_t);
    ssize_t (*PyList_Size)(PyObject *);
    PyObject *(*PyObject_CallFunctionObjArgs)(PyObject *, ...);
    PyObject *(*PyObject_GetAttrString)(PyObject *, const char *);
    int (*PyObject_SetAttrString)(PyObject *, const char *, PyObject *);
    int (*PyObject_IsInstance)(PyObject *, PyObject *);
    int (*PyObject_IsTrue)(PyObject *);
    void (*Py_IncRef)(PyObject *);
    void (*Py_DecRef)(PyObject *);
    PyObject *(*PyErr_Occurred)(void);
    void (*PyErr_Clear)(void);
    void (*PyErr_Print)(void);
    void (*PyErr_SetString)(PyObject *, const char *);
    int (*PyThreadState_SetAsyncExc)(unsigned long, PyObject *);
    PyObject **PyExc_KeyboardInterrupt;
    PyObject **PyExc_RuntimeError;
    PyObject *_Py_NoneStruct; /* data: &None, &True, &False, the tuple and list types */
    PyObject *_Py_TrueStruct;
    PyObject *_Py_FalseStruct;
    PyObject *PyTuple_Type;
    PyObject *PyList_Type;
    /* 3.6 only creates the GIL when a second thread first needs it: */
    int (*PyEval_ThreadsInitialized)(void); /* optional */
    void (*PyEval_InitThreads)(void);       /* optional */
};

#endif
