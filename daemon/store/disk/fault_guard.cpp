// SPDX-License-Identifier: MIT
#include "daemon/store/disk/fault_guard.hpp"

#include <csetjmp>
#include <csignal>
#include <mutex>

namespace pt2cache::daemon::store {

namespace {

// The guarded call this thread is in, if any (read by the signal handler:
// the executable's own thread-locals are safe to touch there).
thread_local sigjmp_buf* t_jump = nullptr;

struct sigaction g_previous_segv {};
struct sigaction g_previous_bus {};

void on_fault(int signal, siginfo_t* info, void* ucontext) {
    if (sigjmp_buf* jump = t_jump; jump != nullptr) {
        t_jump = nullptr;
        siglongjmp(*jump, signal);
    }
    const struct sigaction& previous = signal == SIGBUS ? g_previous_bus : g_previous_segv;
    if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
        previous.sa_sigaction(signal, info, ucontext);
        return;
    }
    if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN &&
        previous.sa_handler != nullptr) {
        previous.sa_handler(signal);
        return;
    }
    // The default action: returning re-runs the faulting instruction, which
    // now kills the process as if no handler had been installed.
    struct sigaction fallback {};
    fallback.sa_handler = SIG_DFL;
    sigemptyset(&fallback.sa_mask);
    sigaction(signal, &fallback, nullptr);
}

} // namespace

void install_fault_handlers() {
    static std::mutex mutex;
    std::lock_guard lock(mutex);
    for (const int signal : {SIGSEGV, SIGBUS}) {
        struct sigaction current {};
        sigaction(signal, nullptr, &current);
        if ((current.sa_flags & SA_SIGINFO) != 0 && current.sa_sigaction == on_fault) {
            continue;
        }
        struct sigaction action {};
        action.sa_sigaction = on_fault;
        action.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&action.sa_mask);
        sigaction(signal, &action, signal == SIGBUS ? &g_previous_bus : &g_previous_segv);
    }
}

void leave_guarded() {
    if (sigjmp_buf* jump = t_jump; jump != nullptr) {
        t_jump = nullptr;
        siglongjmp(*jump, SIGABRT);
    }
}

bool run_guarded(void (*fn)(void*), void* context) {
    sigjmp_buf jump;
    // Without saving the signal mask (a syscall on every call): a jump out of
    // the handler leaves the fault's signal blocked, so unblock it then.
    if (sigsetjmp(jump, 0) != 0) {
        sigset_t faults;
        sigemptyset(&faults);
        sigaddset(&faults, SIGSEGV);
        sigaddset(&faults, SIGBUS);
        pthread_sigmask(SIG_UNBLOCK, &faults, nullptr);
        return false; // t_jump was cleared before the jump
    }
    t_jump = &jump;
    fn(context);
    t_jump = nullptr;
    return true;
}

} // namespace pt2cache::daemon::store
