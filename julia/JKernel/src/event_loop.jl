# event_loop.jl: when the event loop last polled, on a page of memory the supervisor reads.
#
# An INT frame reaches a cell only when it yields; a cell that computes without yielding gets
# the supervisor's SIGINT instead, which must not land while Julia is in its event loop: there
# a signal can unwind through a libuv callback and leave the I/O it served stopped for good
# (supervisor/interrupts.py, _INT_ACK_WAIT). The supervisor used to wait 20 ms without an
# answer to the frame to be sure the loop was not running; these stamps tell it at once
# whether the loop polled in the last 20 ms, so that a loop that never yields gets its SIGINT
# as soon as IJulia's does (IJulia signals at once, wherever Julia is).
#
# libuv runs, in each iteration of its loop, timers, pending callbacks, idle, prepare, then the
# poll with its I/O callbacks, then check (docs.libuv.org, "Design overview"): a prepare handle
# stamps the time before each poll (slot 1) and a check handle after it (slot 2), so slot 1 >
# slot 2 means the loop is in its poll. Any thread that runs the loop stamps. The stamps are
# time_ns(), CLOCK_MONOTONIC through uv_hrtime, the clock of Python's time.monotonic_ns().
#
# The callbacks are Julia functions, like every libuv callback Julia has (uv_readcb, uv_timercb
# in base/stream.jl and asyncevent.jl), and like them are entered through a GC transition,
# which is a safepoint: a SIGINT already pending when an idle loop wakes can be thrown in
# them, as Julia throws it inside the poll anyway (a SIGINT to a thread idle in libuv). Each
# handle is alone in its libuv queue (Julia starts no prepare or check handle of its own),
# which libuv relinks before the callback runs (loop-watcher.c), so such a throw leaves the
# queue whole. They must not allocate: see stamp_event_loop!.
#
# Where /proc shows no threads (not Linux) the supervisor cannot tell a running thread from a
# blocked one, and waits as before: no page then.

const LOOP_PAGE = Ref{Ptr{UInt64}}(C_NULL)   # two UInt64: before the last poll, after it
const PREPARE_HANDLE = Ref{Ptr{Cvoid}}(C_NULL)

"""libuv's callback for both handles: slot 1 before the poll (prepare), slot 2 after (check)."""
loop_stamp(handle::Ptr{Cvoid}) =
    (unsafe_store!(LOOP_PAGE[], time_ns(), handle == PREPARE_HANDLE[] ? 1 : 2); nothing)

"""
    watch_event_loop!() -> path

Map the page of shared memory where the event loop's polls will be stamped (stamp_event_loop!,
a warm-up step) and return the path by which the supervisor opens it (`/proc/<pid>/fd/<fd>`),
which the INF frame gives; "" where there is no /proc or the page could not be made (logged).
A memfd: nothing of it outlives the process.
"""
function watch_event_loop!()
    isdir("/proc/self/task") || return ""
    try
        fd = ccall(:memfd_create, Cint, (Cstring, Cuint), "jutul-jkernel-event-loop", 0x1)  # MFD_CLOEXEC
        fd < 0 && (diag("no event loop page: memfd_create failed (", Libc.strerror(), ")"); return "")
        page = ccall(:ftruncate, Cint, (Cint, Clong), fd, 16) == 0 ? map_shared(fd, 16) : C_NULL
        page == C_NULL && (diag("no event loop page: ", Libc.strerror()); return "")
        LOOP_PAGE[] = Ptr{UInt64}(page)
        return string("/proc/", getpid(), "/fd/", fd)   # the fd stays open: the page's name
    catch e
        e isa InterruptException && rethrow()
        diag("no event loop page: ", sprint(showerror, e))   # no memfd_create (glibc < 2.27)
        return ""
    end
end

"""`nbytes` of the file open as `fd`, mapped shared and writable (POSIX mmap); C_NULL on failure."""
function map_shared(fd::Cint, nbytes::Int)
    p = ccall(:mmap, Ptr{Cvoid}, (Ptr{Cvoid}, Csize_t, Cint, Cint, Cint, Clong), C_NULL, nbytes,
              0x1 | 0x2, 0x01, fd, 0)   # PROT_READ | PROT_WRITE, MAP_SHARED
    return p == Ptr{Cvoid}(-1) ? C_NULL : p   # MAP_FAILED
end

"""
    stamp_event_loop!()

Start stamping the event loop's polls on the page (a warm-up step: until then the supervisor
finds no stamps and waits out the silence, as without a page). The callback is made at run
time: a @cfunction compiled into the package image (1.10) calls its function with the handle
boxed, an allocation at every poll, and the garbage made an idle Julia take a page fault every
~0.3 s, which the supervisor reads as compiling (interrupts.py, _COMPILE_QUIET: a cell that
caught an interrupt then waited 30 s for its next one). Made here it costs ~10 ms once, which
the start does not wait for.
"""
function stamp_event_loop!()
    (LOOP_PAGE[] == C_NULL || PREPARE_HANDLE[] != C_NULL) && return nothing
    loop = Base.eventloop()
    stamp = Core.eval(JKernel, :(@cfunction(loop_stamp, Cvoid, (Ptr{Cvoid},))))
    # calloc: Julia's exit closes every handle of the loop (jl_uv_closeHandle) and reads a
    # non-NULL `data` as the Julia object owning it.
    prepare = Libc.calloc(1, ccall(:uv_handle_size, Csize_t, (Cint,), Base.UV_PREPARE))
    check = Libc.calloc(1, ccall(:uv_handle_size, Csize_t, (Cint,), Base.UV_CHECK))
    PREPARE_HANDLE[] = prepare
    Base.iolock_begin()
    try
        ok = ccall(:uv_prepare_init, Cint, (Ptr{Cvoid}, Ptr{Cvoid}), loop, prepare) == 0 &&
            ccall(:uv_check_init, Cint, (Ptr{Cvoid}, Ptr{Cvoid}), loop, check) == 0 &&
            ccall(:uv_prepare_start, Cint, (Ptr{Cvoid}, Ptr{Cvoid}), prepare, stamp) == 0 &&
            ccall(:uv_check_start, Cint, (Ptr{Cvoid}, Ptr{Cvoid}), check, stamp) == 0
        # (Without the check stamp the page reads as never polled: the supervisor waits as
        # without a page.)
        ok || (diag("event loop not stamped: libuv refused a handle"); return nothing)
        # Neither handle keeps the loop alive (Julia's loop waits for its own handles).
        ccall(:uv_unref, Cvoid, (Ptr{Cvoid},), prepare)
        ccall(:uv_unref, Cvoid, (Ptr{Cvoid},), check)
    finally
        Base.iolock_end()
    end
    nothing
end
