/* The kernels of the onnxruntime custom operators that run an OffloadSession's device steps
 * inside one onnxruntime session (host/device_ops.py builds this file and registers the
 * operators; docs/offload.md, "One session").
 *
 * onnxruntime's Python module carries its own copy of onnxruntime, so everything goes through
 * the OrtApi table it hands to RegisterCustomOps. Its slots are onnxruntime's C ABI, which only
 * ever grows (the numbers below hold from API 1 on; version 16 is asked for, onnxruntime 1.16).
 * The slot numbers and API_VERSION are written here only: host/device_ops.py reads them from
 * this file (the registration's slots too) and checks the running onnxruntime against
 * API_VERSION before loading it.
 *
 * A kernel's inputs go to one Python call (what its node's key resolved to when the kernel
 * first ran) as memoryviews over onnxruntime's buffers (no copy), with a function that hands
 * out the outputs' buffers as writable memoryviews (room_of); the call returns the step's
 * results as arrays (strided ones too), each copied once into the output onnxruntime
 * allocates, or None for an output it wrote itself (the device's reply lands where onnxruntime
 * wants it: no copy). A Python exception becomes an onnxruntime error status with its
 * text (the session raises the exception itself). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE__
#include <xmmintrin.h>
#endif

typedef void *Status;

/* OrtApi slots; CREATE_CUSTOM_OP_DOMAIN, CUSTOM_OP_DOMAIN_ADD and ADD_CUSTOM_OP_DOMAIN are
 * called from host/device_ops.py (the registration). */
enum {
    CREATE_STATUS = 0, ERROR_MESSAGE = 2, CREATE_CUSTOM_OP_DOMAIN = 26, CUSTOM_OP_DOMAIN_ADD = 27,
    ADD_CUSTOM_OP_DOMAIN = 28, MUTABLE_DATA = 51, ELEMENT_TYPE = 60, DIMS_COUNT = 61,
    DIMS = 62, TYPE_AND_SHAPE = 65, ATTRIBUTE_INT64 = 86, INPUT_COUNT = 88, GET_INPUT = 90,
    GET_OUTPUT = 91, RELEASE_STATUS = 93, RELEASE_TYPE_AND_SHAPE = 99,
};
#define API_VERSION 16
#define MAX_RANK 64

/* Bytes per element of ONNXTensorElementDataType 0-16 (0: not a fixed-size number). */
static const int element_bytes[17] = {0, 4, 1, 1, 2, 2, 4, 8, 0, 1, 2, 8, 4, 8, 8, 16, 2};

static void **api;
static PyObject *registrar;     /* registrar(options, api) -> None or the refusal's text */
static PyObject *resolver;      /* resolver(key) -> the kernel's call: call(((memoryview,
                                 * element, shape), ...), room) -> [array or None] */

/* Outputs whose buffers a kernel hands out to its call (room_of); further ones are copied. */
#define MAX_ROOMS 8

/* The last buffer handed out for an output: where it lay, its size and the memoryview. */
typedef struct {
    void *data;
    Py_ssize_t bytes;
    PyObject *view;
} Kept;

/* A kernel: its node's key, its call once the first compute has asked for it, its last
 * call's inputs (inputs_of): the objects passed, what onnxruntime said of them (`seen`, `count`
 * of them) and room for what it says of the next call's (`scratch`), `capacity` inputs each;
 * and the last buffer it handed out for each output (room_of). */
typedef struct {
    int64_t key;
    PyObject *call;
    PyObject *last;
    struct Input *seen, *scratch;
    size_t count, capacity;
    Kept kept[MAX_ROOMS];
    PyObject *room;
} Kernel;

/* What a kernel's room function (room_of) hands out from: the compute running the call (NULL
 * once it has returned) and which outputs it handed out, bit j for output j. */
typedef struct {
    Kernel *kernel;
    void *context;
    unsigned written;
} Room;

#define CALL(slot, type, ...) (((type)api[slot])(__VA_ARGS__))
#define CHECK(expression) do { Status status_ = (expression); if (status_) return status_; } \
    while (0)

void maxaccel_set_python(PyObject *register_function, PyObject *resolve_function)
{
    Py_XINCREF(register_function);
    Py_XINCREF(resolve_function);
    registrar = register_function;
    resolver = resolve_function;
}

static Status failure(const char *text)
{
    return CALL(CREATE_STATUS, Status (*)(int, const char *), 1 /* ORT_FAIL */, text);
}

/* The pending Python exception as a status (the GIL held). */
static Status python_failure(void)
{
    PyObject *type, *value, *trace;
    PyErr_Fetch(&type, &value, &trace);
    PyObject *text = value ? PyObject_Str(value) : NULL;
    const char *message = text ? PyUnicode_AsUTF8(text) : NULL;
    Status status = failure(message ? message : "maxaccel: a device step failed");
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(trace);
    PyErr_Clear();
    return status;
}

Status RegisterCustomOps(void *options, const void *api_base)
{
    typedef void **(*GetApi)(uint32_t);
    api = (*(GetApi const *)api_base)(API_VERSION);
    if (!api)   /* an onnxruntime older than 1.16: the session creation says what is missing */
        return 0;
    if (!registrar)
        return failure("maxaccel: the operators were not prepared");
    PyGILState_STATE gil = PyGILState_Ensure();
    Status status = 0;
    PyObject *answer = PyObject_CallFunction(registrar, "KK",
                                             (unsigned long long)(uintptr_t)options,
                                             (unsigned long long)(uintptr_t)api);
    if (!answer)
        status = python_failure();
    else {
        if (answer != Py_None) {
            const char *text = PyUnicode_AsUTF8(answer);
            status = failure(text ? text : "maxaccel: the operators were refused");
        }
        Py_DECREF(answer);
    }
    PyGILState_Release(gil);
    return status;
}

Status maxaccel_create_kernel(void *op, void *ort_api, void *info, void **kernel)
{
    int64_t key = 0;
    (void)op;
    (void)ort_api;
    CHECK(CALL(ATTRIBUTE_INT64, Status (*)(void *, const char *, int64_t *), info, "key", &key));
    Kernel *made = calloc(1, sizeof *made);
    if (!made)
        return failure("maxaccel: no memory for a kernel");
    made->key = key;
    *kernel = made;
    return 0;
}

void maxaccel_destroy_kernel(void *kernel)
{
    Kernel *made = kernel;
    int holds = made->call || made->last || made->room;
    for (int j = 0; j < MAX_ROOMS; j++)
        holds = holds || made->kept[j].view;
    if (holds && Py_IsInitialized()) {    /* after the end: left as is */
        PyGILState_STATE gil = PyGILState_Ensure();
        Py_XDECREF(made->call);
        Py_XDECREF(made->last);
        for (int j = 0; j < MAX_ROOMS; j++)
            Py_XDECREF(made->kept[j].view);
        if (made->room) {   /* a call may keep it: then it hands out nothing more */
            Room *room = PyCapsule_GetPointer(PyCFunction_GET_SELF(made->room), "maxaccel.room");
            if (room)
                room->kernel = NULL;
            PyErr_Clear();
            Py_DECREF(made->room);
        }
        PyGILState_Release(gil);
    }
    free(made->seen);
    free(made->scratch);
    free(made);
}

/* What onnxruntime says of one input. */
typedef struct Input {
    void *data;
    int element;
    size_t rank;
    int64_t dims[MAX_RANK];
} Input;

static Py_ssize_t bytes_of(const Input *input)
{
    Py_ssize_t bytes = element_bytes[input->element];
    for (size_t d = 0; d < input->rank; d++)
        bytes *= (Py_ssize_t)input->dims[d];
    return bytes;
}

/* Input `index` described into *input. */
static Status describe(void *context, size_t index, Input *input)
{
    void *value = NULL, *info = NULL;
    input->data = NULL;
    CHECK(CALL(GET_INPUT, Status (*)(void *, size_t, void **), context, index, &value));
    CHECK(CALL(TYPE_AND_SHAPE, Status (*)(void *, void **), value, &info));
    Status status = CALL(ELEMENT_TYPE, Status (*)(void *, int *), info, &input->element);
    if (!status)
        status = CALL(DIMS_COUNT, Status (*)(void *, size_t *), info, &input->rank);
    if (!status && (input->rank > MAX_RANK || input->element < 0 || input->element > 16 ||
                    !element_bytes[input->element]))
        status = failure("maxaccel: a device step's input is not a tensor of numbers of rank "
                         "at most 64");
    if (!status)
        status = CALL(DIMS, Status (*)(void *, int64_t *, size_t), info, input->dims,
                      input->rank);
    CALL(RELEASE_TYPE_AND_SHAPE, void (*)(void *), info);
    if (!status && bytes_of(input))
        status = CALL(MUTABLE_DATA, Status (*)(void *, void **), value, &input->data);
    return status;
}

/* One input as (memoryview, element type, shape), or NULL with the exception set. */
static PyObject *input_object(const Input *input)
{
    static char nothing;
    Py_ssize_t bytes = bytes_of(input);
    PyObject *shape = PyTuple_New((Py_ssize_t)input->rank);
    int complete = shape != NULL;
    for (size_t d = 0; complete && d < input->rank; d++) {
        PyObject *size = PyLong_FromLongLong(input->dims[d]);
        complete = size != NULL;
        if (complete)
            PyTuple_SET_ITEM(shape, (Py_ssize_t)d, size);
    }
    PyObject *view = PyMemoryView_FromMemory(bytes ? (char *)input->data : &nothing, bytes,
                                             PyBUF_READ);
    if (!complete || !view) {
        Py_XDECREF(shape);
        Py_XDECREF(view);
        return NULL;
    }
    return Py_BuildValue("(NiN)", view, input->element, shape);
}

/* The kernel's inputs as a tuple of input_object()s, or NULL with a status in *status: the
 * tuple of its last call when every input lies where it lay then, of the same type and dims
 * (onnxruntime's memory plan puts a tensor at the same place run after run), so the call can
 * keep what it made of them. */
static PyObject *inputs_of(Kernel *kernel, void *context, Status *status)
{
    size_t count = 0;
    if ((*status = CALL(INPUT_COUNT, Status (*)(void *, size_t *), context, &count)))
        return NULL;
    if (count > kernel->capacity) {     /* the first call (the count never changes after) */
        Input *seen = calloc(count, sizeof *seen), *scratch = calloc(count, sizeof *scratch);
        if (!seen || !scratch) {
            free(seen);
            free(scratch);
            *status = failure("maxaccel: no memory for a kernel's inputs");
            return NULL;
        }
        free(kernel->seen);
        free(kernel->scratch);
        kernel->seen = seen;
        kernel->scratch = scratch;
        kernel->capacity = count;
        kernel->count = 0;
        Py_CLEAR(kernel->last);
    }
    Input *inputs = kernel->scratch;
    int same = kernel->last != NULL && kernel->count == count;
    for (size_t i = 0; i < count && !*status; i++) {
        *status = describe(context, i, &inputs[i]);
        same = same && !*status && inputs[i].data == kernel->seen[i].data &&
               inputs[i].element == kernel->seen[i].element &&
               inputs[i].rank == kernel->seen[i].rank &&
               !memcmp(inputs[i].dims, kernel->seen[i].dims,
                       inputs[i].rank * sizeof inputs[i].dims[0]);
    }
    if (*status)
        return NULL;
    if (same) {
        Py_INCREF(kernel->last);
        return kernel->last;
    }
    PyObject *made = PyTuple_New((Py_ssize_t)count);
    for (size_t i = 0; made && i < count; i++) {
        PyObject *input = input_object(&inputs[i]);
        if (!input)
            Py_CLEAR(made);
        else
            PyTuple_SET_ITEM(made, (Py_ssize_t)i, input);
    }
    if (!made) {
        *status = python_failure();
        return NULL;
    }
    Py_XSETREF(kernel->last, made);
    Py_INCREF(made);
    kernel->scratch = kernel->seen;
    kernel->seen = inputs;
    kernel->count = count;
    return made;
}

/* Copies `count` items (of `size` bytes) `stride` bytes apart to `to`; returns the end of
 * what it wrote. */
static inline char *line(char *to, const char *from, Py_ssize_t count, Py_ssize_t stride,
                         Py_ssize_t size)
{
    if (stride == size) {
        memcpy(to, from, (size_t)(count * size));
        return to + count * size;
    }
    if (size == 4) {   /* float32, the usual case: a copy of constant size, inlined */
        for (Py_ssize_t i = 0; i < count; i++, to += 4)
            memcpy(to, from + i * stride, 4);
        return to;
    }
    for (Py_ssize_t i = 0; i < count; i++, to += size)
        memcpy(to, from + i * stride, (size_t)size);
    return to;
}

#ifdef __SSE__
/* Copies a `rows` x `columns` matrix of 4-byte items whose rows are contiguous in `from` and
 * whose columns lie `stride` bytes apart (a transposed view) to `to`, in C order, 4 x 4 items
 * at a time (`columns` a multiple of 4); returns the end of what it wrote. The shuffles move
 * bits as they are: a NaN's payload and a zero's sign are kept. */
static char *transposed(char *to, const char *from, Py_ssize_t rows, Py_ssize_t columns,
                        Py_ssize_t stride)
{
    float *out = (float *)(void *)to;
    Py_ssize_t r = 0;
    for (; r + 4 <= rows; r += 4)
        for (Py_ssize_t c = 0; c < columns; c += 4) {
            const char *at = from + c * stride + r * 4;
            __m128 a = _mm_loadu_ps((const float *)(const void *)at);
            __m128 b = _mm_loadu_ps((const float *)(const void *)(at + stride));
            __m128 d = _mm_loadu_ps((const float *)(const void *)(at + 2 * stride));
            __m128 e = _mm_loadu_ps((const float *)(const void *)(at + 3 * stride));
            _MM_TRANSPOSE4_PS(a, b, d, e);
            _mm_storeu_ps(out + r * columns + c, a);
            _mm_storeu_ps(out + (r + 1) * columns + c, b);
            _mm_storeu_ps(out + (r + 2) * columns + c, d);
            _mm_storeu_ps(out + (r + 3) * columns + c, e);
        }
    to += r * columns * 4;
    for (; r < rows; r++)
        for (Py_ssize_t c = 0; c < columns; c++, to += 4)
            memcpy(to, from + c * stride + r * 4, 4);
    return to;
}
#endif

/* Copies the items (of `size` bytes) of a strided buffer to `to`, in C order; returns the
 * end of what it wrote. The last two axes are one loop nest: a pool's result on NCHWc
 * tensors has a short, strided last axis (the block's channels), so a call per line of it
 * would be a call per pixel. */
static char *gather(char *to, const char *from, int ndim, const Py_ssize_t *shape,
                    const Py_ssize_t *strides, Py_ssize_t size)
{
    if (ndim == 0) {
        memcpy(to, from, (size_t)size);
        return to + size;
    }
    if (ndim > 2) {
        for (Py_ssize_t i = 0; i < shape[0]; i++)
            to = gather(to, from + i * strides[0], ndim - 1, shape + 1, strides + 1, size);
        return to;
    }
    if (ndim == 1)
        return line(to, from, shape[0], strides[0], size);
#ifdef __SSE__
    if (size == 4 && strides[0] == 4 && shape[1] % 4 == 0)   /* a pool's on NCHWc tensors */
        return transposed(to, from, shape[0], shape[1], strides[1]);
#endif
    for (Py_ssize_t i = 0; i < shape[0]; i++)
        to = line(to, from + i * strides[0], shape[1], strides[1], size);
    return to;
}

/* Copies one result into output `index`: an array (anything with a buffer, strided or not),
 * or (dims, array) for an output of other dims than the array's, its items in the array's C
 * order (a pool's result on onnxruntime's NCHWc tensors: docs/offload.md). */
static Status output_of(void *context, size_t index, PyObject *result)
{
    PyObject *given = NULL;
    if (PyTuple_Check(result) && PyTuple_GET_SIZE(result) == 2) {
        given = PyTuple_GET_ITEM(result, 0);
        result = PyTuple_GET_ITEM(result, 1);
    }
    Py_buffer buffer;
    if (PyObject_GetBuffer(result, &buffer, PyBUF_STRIDES) < 0)
        return python_failure();
    int64_t dims[MAX_RANK];
    Status status = 0;
    Py_ssize_t rank = buffer.ndim;
    if (given) {
        rank = PySequence_Check(given) ? PySequence_Size(given) : -1;
        Py_ssize_t items = 1;
        int negative = 0;
        for (Py_ssize_t d = 0; d < rank && d < MAX_RANK; d++) {
            PyObject *size = PySequence_GetItem(given, d);
            dims[d] = size ? PyLong_AsLongLong(size) : -1;
            Py_XDECREF(size);
            if (dims[d] < 0)
                negative = 1;
            items *= (Py_ssize_t)dims[d];
        }
        if (PyErr_Occurred())
            status = python_failure();
        else if (rank < 0 || rank > MAX_RANK || negative || items * buffer.itemsize != buffer.len)
            status = failure("maxaccel: a device step's result does not fill the dims given");
    } else if (rank > MAX_RANK)
        status = failure("maxaccel: a device step's result has a rank above 64");
    for (int d = 0; !status && !given && d < rank; d++)
        dims[d] = buffer.shape[d];
    void *value = NULL, *data = NULL;
    if (!status)
        status = CALL(GET_OUTPUT, Status (*)(void *, size_t, const int64_t *, size_t, void **),
                      context, index, dims, (size_t)rank, &value);
    if (!status && buffer.len) {
        status = CALL(MUTABLE_DATA, Status (*)(void *, void **), value, &data);
        if (!status) {
            if (PyBuffer_IsContiguous(&buffer, 'C'))
                memcpy(data, buffer.buf, (size_t)buffer.len);
            else
                gather(data, buffer.buf, buffer.ndim, buffer.shape, buffer.strides,
                       buffer.itemsize);
        }
    }
    PyBuffer_Release(&buffer);
    return status;
}

/* An onnxruntime status as the pending Python exception (NULL returned), released. */
static PyObject *raise_status(Status status)
{
    const char *text = CALL(ERROR_MESSAGE, const char *(*)(Status), status);
    PyErr_Format(PyExc_RuntimeError, "onnxruntime: %s", text ? text : "an error");
    CALL(RELEASE_STATUS, void (*)(Status), status);
    return NULL;
}

/* room(index, dims): output `index` of the running compute, of ONNX dims `dims`, as a writable
 * memoryview of its bytes; the same object as the last one handed out for that output while
 * the tensor lies where it lay with as many bytes (onnxruntime's memory plan puts a tensor at
 * the same place run after run), so the call can keep what it made of it. Handed out only
 * while the kernel's call runs. */
static PyObject *room_of(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    static char nothing;
    Room *room = PyCapsule_GetPointer(self, "maxaccel.room");
    if (!room)
        return NULL;
    if (!room->context || !room->kernel) {
        PyErr_SetString(PyExc_RuntimeError, "maxaccel: an output's room is handed out only "
                        "while its kernel's call runs");
        return NULL;
    }
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "maxaccel: room(index, dims) takes two arguments");
        return NULL;
    }
    Py_ssize_t index = PyLong_AsSsize_t(args[0]);
    if (index == -1 && PyErr_Occurred())
        return NULL;
    if (index < 0 || index >= MAX_ROOMS) {
        PyErr_Format(PyExc_ValueError, "maxaccel: room(index, dims): index %zd is not one of "
                     "the first %d outputs", index, MAX_ROOMS);
        return NULL;
    }
    PyObject *given = PySequence_Fast(args[1], "maxaccel: room(index, dims): dims is a "
                                      "sequence of sizes");
    if (!given)
        return NULL;
    int64_t dims[MAX_RANK];
    Py_ssize_t rank = PySequence_Fast_GET_SIZE(given);
    for (Py_ssize_t d = 0; d < rank && d < MAX_RANK; d++) {
        dims[d] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(given, d));
        if (dims[d] < 0 && !PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "maxaccel: room(index, dims): a negative size");
        if (PyErr_Occurred())
            break;
    }
    Py_DECREF(given);
    if (PyErr_Occurred())
        return NULL;
    if (rank > MAX_RANK) {
        PyErr_SetString(PyExc_ValueError, "maxaccel: room(index, dims): a rank above 64");
        return NULL;
    }
    void *value = NULL, *info = NULL, *data = NULL;
    int element = 0;
    Status status = CALL(GET_OUTPUT, Status (*)(void *, size_t, const int64_t *, size_t, void **),
                         room->context, (size_t)index, dims, (size_t)rank, &value);
    if (!status)
        status = CALL(TYPE_AND_SHAPE, Status (*)(void *, void **), value, &info);
    if (!status) {
        status = CALL(ELEMENT_TYPE, Status (*)(void *, int *), info, &element);
        CALL(RELEASE_TYPE_AND_SHAPE, void (*)(void *), info);
    }
    if (status)
        return raise_status(status);
    if (element < 0 || element > 16 || !element_bytes[element]) {
        PyErr_SetString(PyExc_TypeError, "maxaccel: room(index, dims): the output is not a "
                        "tensor of numbers");
        return NULL;
    }
    Py_ssize_t bytes = element_bytes[element];
    for (Py_ssize_t d = 0; d < rank; d++)
        bytes *= (Py_ssize_t)dims[d];
    if (bytes && (status = CALL(MUTABLE_DATA, Status (*)(void *, void **), value, &data)))
        return raise_status(status);
    room->written |= 1u << index;
    Kept *kept = &room->kernel->kept[index];
    if (!kept->view || kept->data != data || kept->bytes != bytes) {
        PyObject *view = PyMemoryView_FromMemory(bytes ? (char *)data : &nothing, bytes,
                                                 PyBUF_WRITE);
        if (!view)
            return NULL;
        Py_XSETREF(kept->view, view);
        kept->data = data;
        kept->bytes = bytes;
    }
    Py_INCREF(kept->view);
    return kept->view;
}

static PyMethodDef room_definition = {"room", (PyCFunction)(void (*)(void))room_of,
                                      METH_FASTCALL, NULL};

static void free_room(PyObject *capsule)
{
    free(PyCapsule_GetPointer(capsule, "maxaccel.room"));
}

/* A new room function for `kernel`, or NULL with the exception set. */
static PyObject *new_room(Kernel *kernel)
{
    Room *room = calloc(1, sizeof *room);
    if (!room)
        return PyErr_NoMemory();
    room->kernel = kernel;
    PyObject *capsule = PyCapsule_New(room, "maxaccel.room", free_room);
    if (!capsule) {
        free(room);
        return NULL;
    }
    PyObject *function = PyCFunction_NewEx(&room_definition, capsule, NULL);
    Py_DECREF(capsule);
    return function;
}

static Status run(Kernel *kernel, void *context)
{
    if (!kernel->call) {
        kernel->call = PyObject_CallFunction(resolver, "L", (long long)kernel->key);
        if (!kernel->call)
            return python_failure();
    }
    Status status = 0;
    PyObject *inputs = inputs_of(kernel, context, &status);
    if (!inputs)
        return status;
    /* The kernel's room function, or a new one while another thread's call on this kernel
     * runs (the GIL let go during its device call) and hands out from it. */
    if (!kernel->room)
        kernel->room = new_room(kernel);
    Room *room = kernel->room ? PyCapsule_GetPointer(PyCFunction_GET_SELF(kernel->room),
                                                     "maxaccel.room") : NULL;
    PyObject *function = NULL;
    if (room && !room->context) {
        function = kernel->room;
        Py_INCREF(function);
    } else if (room && (function = new_room(kernel)))
        room = PyCapsule_GetPointer(PyCFunction_GET_SELF(function), "maxaccel.room");
    if (!function || !room) {
        Py_XDECREF(function);
        Py_DECREF(inputs);
        return python_failure();
    }
    room->context = context;
    room->written = 0;
    PyObject *results = PyObject_CallFunctionObjArgs(kernel->call, inputs, function, NULL);
    room->context = NULL;
    unsigned written = room->written;
    Py_DECREF(function);
    Py_DECREF(inputs);
    if (!results)
        return python_failure();
    PyObject *sequence = PySequence_Fast(results, "maxaccel: a step's results are a sequence");
    Py_DECREF(results);
    if (!sequence)
        return python_failure();
    for (Py_ssize_t j = 0; !status && j < PySequence_Fast_GET_SIZE(sequence); j++) {
        PyObject *result = PySequence_Fast_GET_ITEM(sequence, j);
        if (result != Py_None)
            status = output_of(context, (size_t)j, result);
        else if (j >= MAX_ROOMS || !(written & (1u << j)))
            status = failure("maxaccel: a device step's result is None for an output it was "
                             "not handed (room(index, dims))");
    }
    Py_DECREF(sequence);
    return status;
}

Status maxaccel_compute(void *kernel, void *context)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    Status status = run(kernel, context);
    PyGILState_Release(gil);
    return status;
}
