/* Discovery's sweep loop in C (issue 9 item 5: a program's first traced run).
 *
 * disasm.c decodes a stretch of code with capstone's C library and hands Python flat arrays;
 * Python then made one `Insn` per instruction and kept it in the decoder's table, ~1 µs an
 * instruction in the interpreter, ~12 ms of static glibc's start-up (bench/startup_phases.py).
 * This module, a CPython extension (unlike the rest of emutrace/native, a plain library loaded
 * with ctypes), does that loop: `stretch` decodes, makes the same `Insn` tuples and keeps
 * them in the same table, with the same stops.  Capstone's cs_disasm and cs_free are handed
 * in as addresses (the wheel's libcapstone.so, as disasm.c's), with the handle disasm.c
 * opened.  emutrace/discover/decode.py `Decoder._decode_stretch` keeps the Python loop as
 * the reference; tests/test_disasm.py runs both over each ISA's fib and compares.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* capstone's cs_insn up to the fields read here (capstone 5: include/capstone/capstone.h),
 * declared through the wheel's header when the build has it */
#if defined(__has_include)
#if __has_include(<capstone/capstone.h>)
#include <capstone/capstone.h>
#define SWEEP_CAPSTONE 1
#endif
#endif

#ifdef SWEEP_CAPSTONE

typedef size_t (*cs_disasm_fn)(csh, const uint8_t *, size_t, uint64_t, size_t, cs_insn **);
typedef void (*cs_free_fn)(cs_insn *, size_t);

/* stretch(disasm, free, handle, code, addr, stop, count, alt, cache, insn_type) -> list
 *
 * Decode code (the bytes at addr) with capstone, at most count instructions (0: all), and
 * return the instructions from addr on, back to back, as insn_type tuples
 * (addr, size, mnemonic, op_str, raw bytes, alt): one already in cache under (addr, alt) is
 * that one, one not there is made and put there; the list ends before an address cache holds
 * None for (undecodable), after the instruction reaching stop, and after a mnemonic starting
 * with "it" when alt (Thumb's IT: the instructions after it are decoded by a new call).  An
 * empty list where nothing decodes at addr (None is then put in cache under (addr, alt)). */
static PyObject *sweep_stretch(PyObject *self, PyObject *args) {
    (void)self;
    unsigned long long disasm_addr, free_addr, handle, addr, stop;
    Py_buffer code;
    Py_ssize_t count;
    int alt;
    PyObject *cache, *insn_type;
    if (!PyArg_ParseTuple(args, "KKKy*KKnpO!O!", &disasm_addr, &free_addr, &handle, &code,
                          &addr, &stop, &count, &alt, &PyDict_Type, &cache, &PyType_Type,
                          &insn_type))
        return NULL;
    PyTypeObject *type = (PyTypeObject *)insn_type;
    if (!PyType_IsSubtype(type, &PyTuple_Type)) {
        PyBuffer_Release(&code);
        PyErr_SetString(PyExc_TypeError, "insn_type must be a tuple type");
        return NULL;
    }
    cs_disasm_fn disasm = (cs_disasm_fn)(uintptr_t)disasm_addr;
    cs_free_fn free_insns = (cs_free_fn)(uintptr_t)free_addr;
    cs_insn *insns = NULL;
    size_t got = disasm((csh)handle, (const uint8_t *)code.buf, (size_t)code.len, addr,
                        (size_t)(count < 0 ? 0 : count), &insns);
    PyObject *run = PyList_New(0);
    PyObject *flag = alt ? Py_True : Py_False;
    for (size_t i = 0; run != NULL && i < got; i++) {
        const cs_insn *ci = &insns[i];
        PyObject *at = PyLong_FromUnsignedLongLong(ci->address);
        PyObject *key = at == NULL ? NULL : PyTuple_Pack(2, at, flag);
        if (key == NULL) {
            Py_XDECREF(at);
            Py_CLEAR(run);
            break;
        }
        PyObject *insn = PyDict_GetItemWithError(cache, key); /* borrowed */
        if (insn == Py_None) {
            Py_DECREF(at);
            Py_DECREF(key);
            break;
        }
        if (insn == NULL && PyErr_Occurred()) {
            Py_DECREF(at);
            Py_DECREF(key);
            Py_CLEAR(run);
            break;
        }
        if (insn != NULL) {
            Py_INCREF(insn);
            Py_DECREF(at);
        } else {
            /* a tuple subtype without fields of its own, made as tuple.__new__ makes one */
            PyObject *fields[5] = {
                PyLong_FromLong(ci->size),
                PyUnicode_FromString(ci->mnemonic),
                PyUnicode_FromString(ci->op_str),
                PyBytes_FromStringAndSize((const char *)code.buf + (ci->address - addr),
                                          ci->size),
                NULL};
            insn = type->tp_alloc(type, 6);
            int bad = insn == NULL;
            for (int f = 0; f < 4; f++)
                bad |= fields[f] == NULL;
            if (bad) {
                for (int f = 0; f < 4; f++)
                    Py_XDECREF(fields[f]);
                Py_XDECREF(insn);
                Py_DECREF(at);
                Py_DECREF(key);
                Py_CLEAR(run);
                break;
            }
            PyTuple_SET_ITEM(insn, 0, at); /* (steals at) */
            for (int f = 0; f < 4; f++)
                PyTuple_SET_ITEM(insn, f + 1, fields[f]);
            Py_INCREF(flag);
            PyTuple_SET_ITEM(insn, 5, flag);
            if (PyDict_SetItem(cache, key, insn) < 0) {
                Py_DECREF(insn);
                Py_DECREF(key);
                Py_CLEAR(run);
                break;
            }
        }
        Py_DECREF(key);
        int appended = PyList_Append(run, insn);
        Py_DECREF(insn);
        if (appended < 0) {
            Py_CLEAR(run);
            break;
        }
        if (ci->address + ci->size >= stop ||
            (alt && ci->mnemonic[0] == 'i' && ci->mnemonic[1] == 't'))
            break;
    }
    if (insns != NULL)
        free_insns(insns, got);
    if (run != NULL && PyList_GET_SIZE(run) == 0) {
        PyObject *key = Py_BuildValue("(KO)", addr, flag);
        if (key == NULL || PyDict_SetItem(cache, key, Py_None) < 0)
            Py_CLEAR(run);
        Py_XDECREF(key);
    }
    PyBuffer_Release(&code);
    return run;
}

#endif

static PyMethodDef sweep_methods[] = {
#ifdef SWEEP_CAPSTONE
    {"stretch", sweep_stretch, METH_VARARGS,
     "Decode a stretch of code into the decoder's instruction table (decode.py)."},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef sweep_module = {
    PyModuleDef_HEAD_INIT, "_sweep",
    "Discovery's sweep loop in C; emutrace/discover/decode.py keeps the Python reference.",
    -1, sweep_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__sweep(void) { return PyModule_Create(&sweep_module); }
