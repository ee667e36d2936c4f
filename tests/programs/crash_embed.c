/* The Python interpreter embedded in a C program (libpython3.11.so, not python3's static copy),
 * so that a process's every file can be a private copy: a Python -> C -> Python recursion
 * (sorted() calling its key) that ends in a SIGSEGV the process sends itself. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static const char SCRIPT[] =
    "import os, signal\n"
    "def descend(n):\n"
    "    if n == 0:\n"
    "        os.kill(os.getpid(), signal.SIGSEGV)\n"
    "    return sorted([n], key=lambda x: descend(x - 1))\n"
    "descend(30)\n";

int main(void)
{
    PyConfig config;
    PyConfig_InitIsolatedConfig(&config);
    config.site_import = 0;
    PyStatus status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status))
        Py_ExitStatusException(status);
    return PyRun_SimpleString(SCRIPT) == 0 ? 0 : 1;
}
