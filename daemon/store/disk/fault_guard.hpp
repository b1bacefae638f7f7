// SPDX-License-Identifier: MIT
// Contains the memory faults that reading a corrupt memory-mapped file raises.
//
// LMDB follows the page numbers, offsets and sizes it finds in small.mdb
// without checking them against the file: a corrupt page, or a file another
// process truncated, makes it read outside the pages (SIGSEGV) or past the end
// of the file (SIGBUS). Inside `run_guarded`, such a fault raised by the
// calling thread returns `false` instead of killing the daemon; the caller
// treats the file as corrupt and stops using it (LMDB's own assertions end
// the same way, see leave_guarded). Faults anywhere else are
// handled as before the handlers were installed: by the previous handler (a
// sanitizer's, say), else by the default action (the process dies, with a
// core dump).
//
// A jump out of the guarded code skips its destructors: it may hold no lock
// and own nothing but memory the caller accepts to leak, and the state it was
// changing (an LMDB write transaction) must not be used again.
#pragma once

#include <utility>

namespace pt2cache::daemon::store {

// Installs the SIGSEGV and SIGBUS handlers unless they are installed already
// (a handler installed since, a test framework's say, is kept as the one that
// handles the faults outside a guard). Thread-safe; SmallStore::open calls it.
void install_fault_handlers();

// Runs `fn(context)`; false when it raised SIGSEGV or SIGBUS (and did not
// finish). Needs install_fault_handlers() first. Not reentrant.
bool run_guarded(void (*fn)(void*), void* context);

// Called by code that finds, inside a guarded call, that it cannot go on (an
// LMDB assertion on a corrupt tree): leaves the guarded call as a fault does.
// Returns when no guarded call runs on this thread.
void leave_guarded();

template <class Fn>
bool run_guarded(Fn& fn) {
    return run_guarded([](void* context) { (*static_cast<Fn*>(context))(); }, &fn);
}

} // namespace pt2cache::daemon::store
