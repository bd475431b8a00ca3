/* The caching-allocator model of memory/allocator.py, compiled: the same rules, the same state, the same results
 * (tests/memory/test_allocator_compiled.py replays random sequences through both and compares their state after each
 * event). A card solve replays tens of thousands of events per probe; in Python each costs 2-3 us, here 20-60 ns.
 *
 * Blocks live in one array and are named by their index (the handle take() returns); each pool is an array of
 * (size, block) kept sorted by (size, segment, offset), as the Python model's sorted lists are: best fit is the first
 * entry whose size is at least the request (ties by segment, then offset, read from the block). See allocator.py for
 * the rules and their sources in c10/cuda/CUDACachingAllocator.cpp.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>

#define MIN_BLOCK 512LL
#define SMALL_SIZE (1LL << 20)
#define SMALL_BUFFER (2LL << 20)
#define LARGE_BUFFER (20LL << 20)
#define MIN_LARGE_ALLOC (10LL << 20)
#define ROUND_LARGE (2LL << 20)

typedef long long i64;

typedef struct {
    i64 size, seg, off;
    int prev, next; /* block indices, -1: none */
    char free, small;
} Block;

typedef struct { /* a free block in its pool: its size, and its index for the segment and offset (ties) */
    i64 size;
    int block;
} Entry;

typedef struct {
    Entry *e;
    Py_ssize_t n, cap;
} Pool;

typedef struct {
    PyObject_HEAD
    PyObject *dict; /* a Python subclass's attributes (allocator.py's keyed blocks) */
    i64 allocated, reserved, peak_allocated, peak_reserved, segments, released, whole_free, limit;
    int expandable, has_limit;
    Pool pools[2]; /* [1]: small, [0]: large */
    int tail[2];
    Block *blocks;
    int nblocks, cap;
    int *spare; /* indices of blocks merged away or released, reused */
    int nspare, spare_cap;
} Core;

/* Room for `blocks` more blocks and `entries` more entries in each pool, made before a take or give changes
 * anything, so that neither can fail half done (a take adds at most two blocks, a new segment and the rest split
 * off it, and one entry to its pool; a give at most one entry). `spare` can hold every block (it grows with
 * `blocks`), so giving one back never allocates. Capacities double until they hold what is asked. */
static int ensure_room(Core *c, Py_ssize_t blocks, Py_ssize_t entries) {
    if ((Py_ssize_t)c->cap - c->nblocks + c->nspare < blocks) {
        Py_ssize_t cap = c->cap ? c->cap : 256;
        while (cap - c->nblocks + c->nspare < blocks) cap *= 2;
        if (cap > INT_MAX / 2) { PyErr_SetString(PyExc_MemoryError, "allocator model: too many blocks"); return -1; }
        Block *b = PyMem_Realloc(c->blocks, (size_t)cap * sizeof(Block));
        if (!b) { PyErr_NoMemory(); return -1; }
        c->blocks = b;
        int *spare = PyMem_Realloc(c->spare, (size_t)cap * sizeof(int));
        if (!spare) { PyErr_NoMemory(); return -1; }
        c->spare = spare;
        c->cap = c->spare_cap = (int)cap;
    }
    for (int k = 0; k < 2; k++) {
        Pool *p = &c->pools[k];
        if (p->cap - p->n < entries) {
            Py_ssize_t cap = p->cap ? p->cap : 64;
            while (cap - p->n < entries) cap *= 2;
            Entry *e = PyMem_Realloc(p->e, (size_t)cap * sizeof(Entry));
            if (!e) { PyErr_NoMemory(); return -1; }
            p->e = e;
            p->cap = cap;
        }
    }
    return 0;
}

static inline int make_room(Core *c) {
    if (c->cap - c->nblocks + c->nspare >= 2 && c->pools[0].n < c->pools[0].cap && c->pools[1].n < c->pools[1].cap)
        return 0;
    return ensure_room(c, 2, 1);
}

static int new_block(Core *c, i64 size, i64 seg, i64 off, int prev, int next, int small) {
    int i = c->nspare ? c->spare[--c->nspare] : c->nblocks++; /* make_room left room */
    Block *b = &c->blocks[i];
    b->size = size; b->seg = seg; b->off = off; b->prev = prev; b->next = next;
    b->free = 1; b->small = (char)small;
    return i;
}

static void drop_block(Core *c, int i) {
    c->spare[c->nspare++] = i;
}

/* first entry in [lo, hi) not before (size, seg, off) (hi where none is). Branches, not conditional moves: a step
 * replays the same pattern of requests layer after layer, and the predictor learns the searches' paths
 * (branchless, the BERT-base step ran 40% slower). */
static inline Py_ssize_t lower_in(const Pool *p, const Block *blocks, Py_ssize_t lo, Py_ssize_t hi, i64 size, i64 seg,
                                  i64 off) {
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) >> 1;
        const Entry *e = &p->e[mid];
        i64 g = blocks[e->block].seg;
        if (e->size < size || (e->size == size && (g < seg || (g == seg && blocks[e->block].off < off)))) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* the entry of block b (or where it goes), from its size, segment and offset */
static inline Py_ssize_t lower(const Pool *p, const Block *blocks, const Block *b) {
    return lower_in(p, blocks, 0, p->n, b->size, b->seg, b->off);
}

/* best fit: the first entry whose size is at least `size` (p->n where none is) */
static inline Py_ssize_t first_fit(const Pool *p, i64 size) {
    Py_ssize_t lo = 0, hi = p->n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) >> 1;
        if (p->e[mid].size < size) lo = mid + 1; else hi = mid;
    }
    return lo;
}

static void pool_insert(Pool *p, const Block *blocks, int index) { /* make_room left room */
    Py_ssize_t i = lower(p, blocks, &blocks[index]);
    memmove(&p->e[i + 1], &p->e[i], (size_t)(p->n - i) * sizeof(Entry));
    p->e[i].size = blocks[index].size; p->e[i].block = index;
    p->n++;
}

static void pool_remove_at(Pool *p, Py_ssize_t i) {
    memmove(&p->e[i], &p->e[i + 1], (size_t)(p->n - i - 1) * sizeof(Entry));
    p->n--;
}

static void pool_remove(Pool *p, const Block *blocks, const Block *b) {
    pool_remove_at(p, lower(p, blocks, b));
}

/* pool_remove_at(p, i) then pool_insert(p, b, index), moving only the entries between the two places: a block split
 * or merged goes back into the pool near where it was. `smaller`: b comes before entry i (a block split: the rest
 * is smaller than the block it was part of), else after it (a merge: larger than what merged into it). */
static void pool_replace(Pool *p, const Block *blocks, Py_ssize_t i, int index, int smaller) {
    const Block *b = &blocks[index];
    Py_ssize_t j = smaller ? lower_in(p, blocks, 0, i, b->size, b->seg, b->off)
                           : lower_in(p, blocks, i + 1, p->n, b->size, b->seg, b->off) - 1; /* its place once i is out */
    if (j > i) memmove(&p->e[i], &p->e[i + 1], (size_t)(j - i) * sizeof(Entry));
    else if (j < i) memmove(&p->e[j + 1], &p->e[j], (size_t)(i - j) * sizeof(Entry));
    p->e[j].size = b->size; p->e[j].block = index;
}

static void reserve(Core *c, i64 bytes) {
    c->reserved += bytes;
    if (c->reserved > c->peak_reserved) c->peak_reserved = c->reserved;
}

static void release_cached(Core *c) {
    for (int k = 1; k >= 0; k--) { /* small pool first, as allocator.py's dict order */
        Pool *p = &c->pools[k];
        Py_ssize_t kept = 0;
        for (Py_ssize_t i = 0; i < p->n; i++) {
            Block *b = &c->blocks[p->e[i].block];
            if (b->prev < 0 && b->next < 0 && b->seg >= 0) {
                c->reserved -= b->size;
                c->released += b->size;
                c->whole_free--;
                drop_block(c, p->e[i].block);
            } else {
                p->e[kept++] = p->e[i];
            }
        }
        p->n = kept;
    }
}

static int grow(Core *c, i64 size, int small) {
    i64 page = small ? SMALL_BUFFER : LARGE_BUFFER, mapped;
    int last = c->tail[small], block;
    if (last >= 0 && c->blocks[last].free) {
        Block *b = &c->blocks[last];
        pool_remove(&c->pools[small], c->blocks, b);
        mapped = (size - b->size + page - 1) / page * page;
        b->size += mapped;
        block = last;
    } else {
        mapped = (size + page - 1) / page * page;
        if (last < 0) {
            c->segments++;
            block = new_block(c, mapped, small ? -1 : -2, 0, -1, -1, small);
        } else {
            block = new_block(c, mapped, c->blocks[last].seg, c->blocks[last].off + c->blocks[last].size, last, -1,
                              small);
            if (block >= 0) c->blocks[last].next = block;
        }
        c->tail[small] = block;
    }
    reserve(c, mapped);
    return block;
}

static int take(Core *c, i64 size) {
    size = (size + MIN_BLOCK - 1) & ~(MIN_BLOCK - 1);
    if (size == 0) size = MIN_BLOCK;
    int small = size <= SMALL_SIZE, block;
    Pool *pool = &c->pools[small];
    Py_ssize_t i = first_fit(pool, size);
    Py_ssize_t at = -1; /* the pool entry of the block taken, left in place until the block is split or not */
    if (i < pool->n) {
        if (c->expandable && pool->e[i].block == c->tail[small] && i + 1 < pool->n) i++;
        block = pool->e[i].block;
        at = i;
        Block *b = &c->blocks[block];
        if (b->prev < 0 && b->next < 0 && b->seg >= 0) c->whole_free--;
    } else if (c->expandable) {
        block = grow(c, size, small);
    } else {
        i64 seg_bytes = small ? SMALL_BUFFER : size < MIN_LARGE_ALLOC ? LARGE_BUFFER :
            (size + ROUND_LARGE - 1) / ROUND_LARGE * ROUND_LARGE;
        if (c->has_limit && c->reserved + seg_bytes > c->limit) release_cached(c);
        c->segments++;
        block = new_block(c, seg_bytes, c->segments, 0, -1, -1, small);
        reserve(c, seg_bytes);
    }
    i64 remaining = c->blocks[block].size - size;
    if (remaining > SMALL_SIZE || (remaining >= MIN_BLOCK && (small || c->expandable))) { /* should_split */
        Block *b = &c->blocks[block];
        int after = b->next;
        int rest = new_block(c, remaining, b->seg, b->off + size, block, after, small);
        b = &c->blocks[block]; /* the array may have moved */
        if (after >= 0) c->blocks[after].prev = rest;
        else if (c->expandable && c->tail[small] == block) c->tail[small] = rest;
        b->next = rest;
        b->size = size;
        if (at >= 0) pool_replace(pool, c->blocks, at, rest, 1);
        else pool_insert(pool, c->blocks, rest);
    } else if (at >= 0) {
        pool_remove_at(pool, at);
    }
    Block *b = &c->blocks[block];
    b->free = 0;
    c->allocated += b->size;
    if (c->allocated > c->peak_allocated) c->peak_allocated = c->allocated;
    return block;
}

static void give(Core *c, int block) {
    Block *b = &c->blocks[block];
    c->allocated -= b->size;
    int small = b->small;
    Pool *pool = &c->pools[small];
    b->free = 1;
    int prev = b->prev, after = b->next;
    Py_ssize_t at = -1; /* the pool entry of a neighbour merged: the merged block takes it (pool_replace) */
    if (prev >= 0 && c->blocks[prev].free) { /* merge into the free block before */
        Block *p = &c->blocks[prev];
        at = lower(pool, c->blocks, p);
        p->size += b->size;
        p->next = after;
        if (after >= 0) c->blocks[after].prev = prev;
        else if (c->expandable && c->tail[small] == block) c->tail[small] = prev;
        drop_block(c, block);
        block = prev;
        b = p;
    }
    if (after >= 0 && c->blocks[after].free) { /* absorb the free block after */
        Block *a = &c->blocks[after];
        Py_ssize_t k = lower(pool, c->blocks, a);
        if (at < 0) {
            at = k;
        } else {
            pool_remove_at(pool, k);
            if (k < at) at--;
        }
        b->size += a->size;
        int nxt = b->next = a->next;
        if (nxt >= 0) c->blocks[nxt].prev = block;
        else if (c->expandable && c->tail[small] == after) c->tail[small] = block;
        drop_block(c, after);
    }
    b = &c->blocks[block];
    if (b->prev < 0 && b->next < 0 && b->seg >= 0) c->whole_free++;
    if (at >= 0) pool_replace(pool, c->blocks, at, block, 0);
    else pool_insert(pool, c->blocks, block);
}

/* Requests past 2^60 B, or a model past 2^62 B reserved, are refused: below them no sum here passes 64 bits (the
 * replay hands workloads that large to the Python model: replay.allocator_for). */
#define MAX_REQUEST (1LL << 60)
#define MAX_RESERVED (1LL << 62)

static int checked_take(Core *c, i64 size) {
    if (size < 0) { PyErr_SetString(PyExc_ValueError, "take: a negative size"); return -1; }
    if (size > MAX_REQUEST || c->reserved > MAX_RESERVED || c->allocated > MAX_RESERVED) {
        PyErr_SetString(PyExc_OverflowError, "take: past the compiled model's 64-bit sizes (the Python model, "
                        "PythonAllocator, takes any size)");
        return -1;
    }
    if (make_room(c) < 0) return -1;
    return take(c, size);
}

/* ---- Python type ---- */

static int Core_init(Core *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"expandable", "limit", NULL};
    int expandable = 0;
    PyObject *limit = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$pO", kwlist, &expandable, &limit)) return -1;
    self->expandable = expandable;
    self->has_limit = limit != Py_None;
    self->limit = self->has_limit ? PyLong_AsLongLong(limit) : 0;
    if (self->has_limit && PyErr_Occurred()) return -1;
    self->tail[0] = self->tail[1] = -1;
    return 0;
}

static PyObject *Core_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Core *self = (Core *)type->tp_alloc(type, 0); /* zeroed */
    if (self) self->tail[0] = self->tail[1] = -1;
    return (PyObject *)self;
}

static void Core_dealloc(Core *self) {
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->dict);
    PyMem_Free(self->blocks);
    PyMem_Free(self->spare);
    PyMem_Free(self->pools[0].e);
    PyMem_Free(self->pools[1].e);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Core_traverse(Core *self, visitproc visit, void *arg) {
    /* the dict only: a static type is not collected, and a heap subclass's traverse visits its own type */
    Py_VISIT(self->dict);
    return 0;
}

static int Core_clear(Core *self) {
    Py_CLEAR(self->dict);
    return 0;
}

static PyObject *Core_take(Core *self, PyObject *arg) {
    i64 size = PyLong_AsLongLong(arg);
    if (size == -1 && PyErr_Occurred()) return NULL;
    int block = checked_take(self, size);
    return block < 0 ? NULL : PyLong_FromLong(block);
}

static PyObject *Core_give(Core *self, PyObject *arg) {
    long block = PyLong_AsLong(arg);
    if (block == -1 && PyErr_Occurred()) return NULL;
    if (block < 0 || block >= self->nblocks || self->blocks[block].free) {
        PyErr_SetString(PyExc_ValueError, "give: not a block taken and not given back");
        return NULL;
    }
    if (make_room(self) < 0) return NULL;
    give(self, (int)block);
    Py_RETURN_NONE;
}

/* take_each and give_each read their own tuple of the items (no code of the caller's runs while they walk it:
 * each item must be an int, and a list the caller changes meanwhile is not theirs) */
static PyObject *int_items(PyObject *seq, const char *what) {
    PyObject *items = PySequence_Tuple(seq);
    if (!items) return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items); i++) {
        PyObject *item = PyTuple_GET_ITEM(items, i);
        if (!PyLong_CheckExact(item) && item != Py_None) {
            PyErr_Format(PyExc_TypeError, "%s: ints only, not %.100s", what, Py_TYPE(item)->tp_name);
            Py_DECREF(items);
            return NULL;
        }
    }
    return items;
}

static PyObject *Core_take_each(Core *self, PyObject *sizes) {
    /* [take(size) for size in sizes]: the replay's per-layer tensors, one call */
    PyObject *items = int_items(sizes, "take_each");
    if (!items) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    PyObject *out = PyList_New(n);
    if (!out) { Py_DECREF(items); return NULL; }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *handle = Core_take(self, PyTuple_GET_ITEM(items, i)); /* None: PyLong_AsLongLong's TypeError */
        if (!handle) { Py_DECREF(out); Py_DECREF(items); return NULL; }
        PyList_SET_ITEM(out, i, handle);
    }
    Py_DECREF(items);
    return out;
}

static PyObject *Core_give_each(Core *self, PyObject *handles) {
    /* give(handle) for each handle that is not None, in order */
    PyObject *items = int_items(handles, "give_each");
    if (!items) return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items); i++) {
        PyObject *item = PyTuple_GET_ITEM(items, i);
        if (item == Py_None) continue;
        PyObject *done = Core_give(self, item);
        if (!done) { Py_DECREF(items); return NULL; }
        Py_DECREF(done);
    }
    Py_DECREF(items);
    Py_RETURN_NONE;
}

static PyObject *Core_pass_each(Core *self, PyObject *sizes) {
    /* take(size) and give the block back at once, for each size in order: tensors made and dropped */
    PyObject *items = int_items(sizes, "pass_each");
    if (!items) return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items); i++) {
        i64 size = PyLong_AsLongLong(PyTuple_GET_ITEM(items, i)); /* None: PyLong_AsLongLong's TypeError */
        if (size == -1 && PyErr_Occurred()) { Py_DECREF(items); return NULL; }
        int block = checked_take(self, size);
        if (block < 0 || make_room(self) < 0) { Py_DECREF(items); return NULL; }
        give(self, block);
    }
    Py_DECREF(items);
    Py_RETURN_NONE;
}

/* Take each size of `sizes` (a tuple of ints) into `blocks` (room for all of them): 0, or -1 on error. */
static int take_all(Core *c, PyObject *sizes, int *blocks) {
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(sizes); j++) {
        i64 size = PyLong_AsLongLong(PyTuple_GET_ITEM(sizes, j)); /* None: PyLong_AsLongLong's TypeError */
        if (size == -1 && PyErr_Occurred()) return -1;
        if ((blocks[j] = checked_take(c, size)) < 0) return -1;
    }
    return 0;
}

static int give_block(Core *c, int block) {
    if (make_room(c) < 0) return -1;
    give(c, block);
    return 0;
}

static PyObject *Core_forward_layers(Core *self, PyObject *args) {
    /* A training forward over its blocks, one call: per block, take each size of kept[i] (what it keeps for
     * backward), then take each size of `passed` and give them back in order (what it computes without keeping).
     * Returns the handles kept, a list per block. */
    PyObject *kept_arg, *passed_arg;
    if (!PyArg_ParseTuple(args, "OO", &kept_arg, &passed_arg)) return NULL;
    PyObject *kept = PySequence_Tuple(kept_arg), *passed = NULL, *out = NULL;
    int *blocks = NULL;
    if (!kept || !(passed = int_items(passed_arg, "forward_layers"))) goto fail;
    Py_ssize_t layers = PyTuple_GET_SIZE(kept), np = PyTuple_GET_SIZE(passed);
    if (!(blocks = PyMem_Malloc(sizeof(int) * (size_t)(np + 1)))) { PyErr_NoMemory(); goto fail; }
    if (!(out = PyList_New(layers))) goto fail;
    for (Py_ssize_t i = 0; i < layers; i++) {
        PyObject *sizes = int_items(PyTuple_GET_ITEM(kept, i), "forward_layers");
        if (!sizes) goto fail;
        Py_ssize_t n = PyTuple_GET_SIZE(sizes);
        PyObject *handles = PyList_New(n);
        if (!handles) { Py_DECREF(sizes); goto fail; }
        PyList_SET_ITEM(out, i, handles);
        for (Py_ssize_t j = 0; j < n; j++) {
            i64 size = PyLong_AsLongLong(PyTuple_GET_ITEM(sizes, j));
            int block = size == -1 && PyErr_Occurred() ? -1 : checked_take(self, size);
            PyObject *h = block < 0 ? NULL : PyLong_FromLong(block);
            if (!h) { Py_DECREF(sizes); goto fail; }
            PyList_SET_ITEM(handles, j, h);
        }
        Py_DECREF(sizes);
        if (take_all(self, passed, blocks) < 0) goto fail;
        for (Py_ssize_t j = 0; j < np; j++)
            if (give_block(self, blocks[j]) < 0) goto fail;
    }
    PyMem_Free(blocks);
    Py_DECREF(kept);
    Py_DECREF(passed);
    return out;
fail:
    PyMem_Free(blocks);
    Py_XDECREF(kept);
    Py_XDECREF(passed);
    Py_XDECREF(out);
    return NULL;
}

static PyObject *Core_backward_layers(Core *self, PyObject *args) {
    /* A training backward over its blocks, one call, from the last: per block, take each size of `made` (the
     * tensors its backward makes: the first `first` of them recomputed, then the activation gradients); where
     * block i has gradients (i < len(grads)), take each of grads[i], kept (returned, in order) when `keep`, else
     * given back at once; then give back made[first:], made[:first], and the handles of saved[i] (None: none). */
    PyObject *saved_arg, *made_arg, *grads_arg;
    Py_ssize_t first;
    int keep;
    if (!PyArg_ParseTuple(args, "OOnOp", &saved_arg, &made_arg, &first, &grads_arg, &keep)) return NULL;
    PyObject *saved = PySequence_Tuple(saved_arg), *made = NULL, *grads = NULL, *out = NULL, *gs = NULL;
    int *blocks = NULL;
    if (!saved || !(made = int_items(made_arg, "backward_layers")) || !(grads = PySequence_Tuple(grads_arg)))
        goto fail;
    Py_ssize_t nm = PyTuple_GET_SIZE(made);
    if (first < 0 || first > nm) { PyErr_SetString(PyExc_ValueError, "backward_layers: first past made"); goto fail; }
    if (!(blocks = PyMem_Malloc(sizeof(int) * (size_t)(nm + 1)))) { PyErr_NoMemory(); goto fail; }
    if (!(out = PyList_New(0))) goto fail;
    for (Py_ssize_t i = PyTuple_GET_SIZE(saved) - 1; i >= 0; i--) {
        if (take_all(self, made, blocks) < 0) goto fail;
        if (i < PyTuple_GET_SIZE(grads)) {
            if (!(gs = int_items(PyTuple_GET_ITEM(grads, i), "backward_layers"))) goto fail;
            Py_ssize_t ng = PyTuple_GET_SIZE(gs);
            for (Py_ssize_t j = 0; j < ng; j++) {
                i64 size = PyLong_AsLongLong(PyTuple_GET_ITEM(gs, j));
                if (size == -1 && PyErr_Occurred()) goto fail;
                int block = checked_take(self, size);
                if (block < 0) goto fail;
                if (keep) {
                    PyObject *h = PyLong_FromLong(block);
                    if (!h) goto fail;
                    int added = PyList_Append(out, h);
                    Py_DECREF(h);
                    if (added < 0) goto fail;
                } else if (give_block(self, block) < 0) goto fail;
            }
            Py_CLEAR(gs);
        }
        for (Py_ssize_t j = first; j < nm; j++)
            if (give_block(self, blocks[j]) < 0) goto fail;
        for (Py_ssize_t j = 0; j < first; j++)
            if (give_block(self, blocks[j]) < 0) goto fail;
        PyObject *done = Core_give_each(self, PyTuple_GET_ITEM(saved, i));
        if (!done) goto fail;
        Py_DECREF(done);
    }
    PyMem_Free(blocks);
    Py_DECREF(saved);
    Py_DECREF(made);
    Py_DECREF(grads);
    return out;
fail:
    PyMem_Free(blocks);
    Py_XDECREF(gs);
    Py_XDECREF(saved);
    Py_XDECREF(made);
    Py_XDECREF(grads);
    Py_XDECREF(out);
    return NULL;
}

static PyObject *Core_empty_cache(Core *self, PyObject *Py_UNUSED(ignored)) {
    i64 released = self->released;
    release_cached(self);
    self->released = released;
    Py_RETURN_NONE;
}

static void *copy_array(const void *src, size_t bytes) {
    void *dst = PyMem_Malloc(bytes ? bytes : 1);
    if (dst && bytes) memcpy(dst, src, bytes);
    return dst;
}

static PyObject *Core_fork(Core *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"limit", NULL};
    PyObject *limit;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "$O", kwlist, &limit)) return NULL;
    if (self->expandable) {
        PyErr_SetString(PyExc_ValueError, "fork: expandable segments or blocks taken by key");
        return NULL;
    }
    PyTypeObject *type = Py_TYPE(self);
    Core *new = (Core *)type->tp_alloc(type, 0);
    if (!new) return NULL;
    memcpy((char *)new + offsetof(Core, allocated), (char *)self + offsetof(Core, allocated),
           sizeof(Core) - offsetof(Core, allocated)); /* the counters; the arrays are copied below */
    new->blocks = NULL; new->spare = NULL; new->pools[0].e = new->pools[1].e = NULL; /* not self's, if it fails */
    new->blocks = copy_array(self->blocks, (size_t)self->cap * sizeof(Block));
    new->spare = copy_array(self->spare, (size_t)self->spare_cap * sizeof(int));
    new->pools[0].e = copy_array(self->pools[0].e, (size_t)self->pools[0].cap * sizeof(Entry));
    new->pools[1].e = copy_array(self->pools[1].e, (size_t)self->pools[1].cap * sizeof(Entry));
    if (!new->blocks || !new->spare || !new->pools[0].e || !new->pools[1].e) {
        Py_DECREF(new);
        return PyErr_NoMemory();
    }
    new->has_limit = limit != Py_None;
    new->limit = new->has_limit ? PyLong_AsLongLong(limit) : 0;
    if (new->has_limit && PyErr_Occurred()) { Py_DECREF(new); return NULL; }
    return (PyObject *)new;
}

static PyObject *pool_state(const Pool *p, const Block *blocks) {
    PyObject *t = PyTuple_New(p->n);
    if (!t) return NULL;
    for (Py_ssize_t i = 0; i < p->n; i++) {
        const Block *b = &blocks[p->e[i].block];
        PyObject *e = Py_BuildValue("(LLL)", p->e[i].size, b->seg, b->off);
        if (!e) { Py_DECREF(t); return NULL; }
        PyTuple_SET_ITEM(t, i, e);
    }
    return t;
}

static PyObject *tail_state(Core *self, int small) {
    int t = self->tail[small];
    if (t < 0) Py_RETURN_NONE;
    Block *b = &self->blocks[t];
    return Py_BuildValue("(LLLO)", b->size, b->seg, b->off, b->free ? Py_True : Py_False);
}

static PyObject *Core_state(Core *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *t1 = tail_state(self, 1), *t0 = tail_state(self, 0), *small = pool_state(&self->pools[1], self->blocks),
             *large = pool_state(&self->pools[0], self->blocks);
    PyObject *out = NULL;
    if (t1 && t0 && small && large)
        out = Py_BuildValue("(LLLLLLL(OO)OO)", self->allocated, self->reserved, self->peak_allocated,
                            self->peak_reserved, self->segments, self->released, self->whole_free, t1, t0, small, large);
    Py_XDECREF(t1); Py_XDECREF(t0); Py_XDECREF(small); Py_XDECREF(large);
    return out;
}

static PyObject *Core_get_limit(Core *self, void *closure) {
    if (!self->has_limit) Py_RETURN_NONE;
    return PyLong_FromLongLong(self->limit);
}

static int Core_set_limit(Core *self, PyObject *value, void *closure) {
    if (value == NULL || value == Py_None) { self->has_limit = 0; self->limit = 0; return 0; }
    i64 limit = PyLong_AsLongLong(value);
    if (limit == -1 && PyErr_Occurred()) return -1;
    self->limit = limit;
    self->has_limit = 1;
    return 0;
}

static PyObject *Core_get_expandable(Core *self, void *closure) { return PyBool_FromLong(self->expandable); }

static PyMethodDef Core_methods[] = {
    {"take", (PyCFunction)Core_take, METH_O, "Allocate `size` bytes; returns the handle to give back."},
    {"give", (PyCFunction)Core_give, METH_O, "Free a block from take()."},
    {"take_each", (PyCFunction)Core_take_each, METH_O, "[take(size) for size in sizes]."},
    {"give_each", (PyCFunction)Core_give_each, METH_O, "give(handle) for each handle that is not None."},
    {"pass_each", (PyCFunction)Core_pass_each, METH_O, "give(take(size)) for each size, in order."},
    {"forward_layers", (PyCFunction)Core_forward_layers, METH_VARARGS,
     "A training forward over its blocks: per block its kept tensors, then tensors made and freed at once."},
    {"backward_layers", (PyCFunction)Core_backward_layers, METH_VARARGS,
     "A training backward over its blocks, from the last: made tensors, gradients, then the frees."},
    {"empty_cache", (PyCFunction)Core_empty_cache, METH_NOARGS, "torch.cuda.empty_cache(), called by the program."},
    {"_fork", (PyCFunction)(void (*)(void))Core_fork, METH_VARARGS | METH_KEYWORDS,
     "A copy that replays on from here under `limit`."},
    {"state", (PyCFunction)Core_state, METH_NOARGS, "Everything the next events' outcome depends on."},
    {NULL}
};

#define MEMBER(name) {#name, T_LONGLONG, offsetof(Core, name), 0, NULL}
static PyMemberDef Core_members[] = {
    MEMBER(allocated), MEMBER(reserved), MEMBER(peak_allocated), MEMBER(peak_reserved), MEMBER(segments),
    MEMBER(released),
    {NULL}
};

static PyGetSetDef Core_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {"limit", (getter)Core_get_limit, (setter)Core_set_limit, "bytes the allocator may reserve (None: no limit)", NULL},
    {"expandable", (getter)Core_get_expandable, NULL, "expandable segments", NULL},
    {NULL}
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "campaign.memory._allocator.Core",
    .tp_doc = "The caching-allocator model (memory/allocator.py), compiled.",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = Core_new,
    .tp_init = (initproc)Core_init,
    .tp_dealloc = (destructor)Core_dealloc,
    .tp_traverse = (traverseproc)Core_traverse,
    .tp_clear = (inquiry)Core_clear,
    .tp_dictoffset = offsetof(Core, dict),
    .tp_methods = Core_methods,
    .tp_members = Core_members,
    .tp_getset = Core_getset,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_allocator", "The caching-allocator model, compiled.", -1};

PyMODINIT_FUNC PyInit__allocator(void) {
    if (PyType_Ready(&CoreType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&CoreType);
    if (PyModule_AddObject(m, "Core", (PyObject *)&CoreType) < 0) {
        Py_DECREF(&CoreType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
