# state.jl: limits, and the server's state (one server per process), all in one place.
#
# What lives here: the limits that several concerns share, and every global the server changes
# while it runs, one line each with a comment on what it holds, grouped by concern (IJulia keeps
# the same in one `Kernel` struct with a comment per field: JuliaLang/IJulia.jl src/IJulia.jl).
# They are `const` Refs and containers rather than fields of one struct, so that every read is
# type-stable and no kernel object is passed around: a process serves one kernel. The types
# they hold are defined here, before them: Evaluation, WarmUpTick, Backend, Lifeline.
#
# What does not: constants that configure one concern and never change stay with it (timeouts
# such as IDLE_BEFORE_WARM_UP and WORKER_PING_WAIT, the PkgIds of Pkg and Distributed,
# LIFELINE_SCRIPT and LOCAL_KEY, SCHEDULER_FILES, INTERRUPTED, the frame kinds and INCOMING in
# frames.jl, HAS_CANCEL_SCOPES, StdioContext). Nor do the globals of the `IJulia` module and
# `MainNames.err` (ijulia.jl: `n`, `ans`, `stdio_bytes`, `orig_stdout`, `orig_stderr`): they
# are IJulia's notebook API, which notebooks and packages read and reset, and the server only
# writes them. Nor does what Base keeps for us (`Base.active_repl_backend`, `stdout`, `stderr`,
# `stdin`, the display stack), which main.jl sets once.

# ---- limits ----

const RESULT_CAP = 64 * 1024          # bytes of a RES payload; streamed output is never capped
const RICH_CAP = 32 * 1024 * 1024     # bytes of one VAL / DSP bundle (images must not be cut)
const OUT_CHUNK = 1024 * 1024         # largest OUT payload
const STDOUT_BUFFER = 64 * 1024       # buffered Julia writes: 40x faster for tiny printlns
const FLUSH_INTERVAL = 0.05           # seconds between flushes while a cell runs (live output)
# Buffering reorders Julia's prints against child processes and C writing to the same fd, so it
# is switched on only while a cell prints heavily (bytes forwarded per FLUSH_INTERVAL).
const BUFFER_ON_BYTES = 16 * 1024
const BUFFER_OFF_BYTES = 2 * 1024
const BUFFER_OFF_TICKS = 4          # quiet intervals in a row before buffering goes off
const DRAIN_TIMEOUT = 5.0             # seconds to wait for a pump to pass its marker
const MAX_HEADER = 256
const MAX_PAYLOAD = 256 * 1024 * 1024
# The rich types every value is tried for, in IJulia's order of preference (JuliaLang/IJulia.jl
# src/display.jl, `ijulia_mime_types` and `ijulia_jsonmime_types`): each entry the value can
# show goes into its bundle, and of a group only the first it can show (Markdown over HTML, the
# newest Vega-Lite). JSON types are sent as JSON, and one whose `show` fails is left out.
# Beyond IJulia: Vega-Lite v5, which JupyterLab 4 renders (with v3, v4 and Vega v5),
# application/json, which it shows as a tree, and a widget's view (comms.jl; IJulia's PyCall
# glue registers it).
const RICH_MIMES = (MIME("image/svg+xml"), MIME[MIME("image/png"), MIME("image/jpeg")],
                    MIME[MIME("text/markdown"), MIME("text/html")], MIME("text/latex"))
const JSON_MIMES = (MIME[[MIME("application/vnd.vegalite.v$n+json") for n in 5:-1:2];
                         [MIME("application/vnd.vega.v$n+json") for n in 5:-1:3]],
                    MIME("application/vnd.dataresource+json"),
                    MIME("application/vnd.plotly.v1+json"),
                    MIME("application/vnd.jupyter.widget-view+json"),
                    MIME("application/json"))
const BINARY_MIMES = ("image/png", "image/jpeg")

# ---- the process and its connection ----

const SOCK = Ref{Union{Base.PipeEndpoint, TCPSocket}}()   # see connect_supervisor
const DIAG = Ref{IO}()                 # the process's original stdout: the startup log
const COLOR = Ref(false)               # Julia runs with --color=yes: stdout, stderr, tracebacks
const SOFTSCOPE = Ref(true)            # JUTUL_JKERNEL_SOFTSCOPE=no turns it off (read in main)
const STARTUP_PENDING = Ref(false)     # the startup file still has to run (in the first cell)
const LOADED_FROM = Ref("source")      # "cache" when server.jl loaded the compiled package
const CLAIMS_DIR = Ref("")             # where INT frames and SIGINTs race for requests ("": none)

# ---- requests, evaluations and interrupts ----

"""An EXE or EXN request: code for the evaluation loop, queued in arrival order."""
struct Evaluation
    id::Int          # the evaluation's id, which every frame about it carries
    code::String
    name::String     # what backtraces call the code: In[<id>], or EXN's <name>
    named::Bool      # an EXN: the name gives a notebook cell's number (In, Out, hooks)
end

"""
A COM request: a frontend's comm message (comm_open, comm_msg or comm_close), which the
evaluation loop runs as evaluation `id`, in arrival order with the cells (comms.jl).
"""
struct CommDelivery
    id::Int
    msg_type::String
    content::Dict{String,Any}         # comm_id, data (always there), target_name for comm_open
    metadata::Dict{String,Any}
    buffers::Vector{Vector{UInt8}}    # binary buffers, as ZMQ carried them
end

"""
    WarmUpTick(generation)

The flusher's word that Julia has been idle for a whole `IDLE_BEFORE_WARM_UP`: the evaluation
loop may run one warm-up step. It travels in QUEUE, the one thing the loop waits on, so it can
never overtake a request queued before it; the loop drops it when a request or a query is
waiting behind it, read or not, or when one was taken since the idle interval began
(`generation`).
"""
struct WarmUpTick
    generation::Int  # IDLE_GENERATION when the idle interval began
end

const QUEUE = Channel{Union{Evaluation,CommDelivery,WarmUpTick}}(Inf)   # what the evaluation
                                                                         # loop takes
const QUERIES = Channel{Tuple{Int,String,String,Int}}(Inf)   # QRY: id, op, code, cursor
const EVAL_TASK = Ref{Task}()          # the evaluation loop's task (main.jl)
const CELL_TASK = Ref{Union{Nothing,Task}}(nothing)   # the running cell's own task, where
                                                      # cells get one (compat.jl, in_cell_task)
const CURRENT = Ref(0)                 # id of the running evaluation, 0 when idle
const LAST_ID = Ref(0)                 # parent of output produced between evaluations
const IN_USER = Ref(false)             # the evaluating task is inside user code
const PENDING_INTERRUPT = Ref(false)   # an interrupt arrived while the server held the task
const INTERRUPTED_BEFORE_START = Ref(0) # id of a queued evaluation interrupted before it ran
const INPUT_WAIT = Ref{Union{Nothing,Channel{Any}}}(nothing)   # where TXT / NIN go while an
                                                               # INP waits for its answer
const THREAD_ONE_WORK = Channel{Tuple{Any,Channel{Any}}}(Inf)  # on_thread_one: (f, answer)
const IDLE_GENERATION = Ref(0)         # requests taken so far (evaluations, comm messages,
                                       # queries taken and answered): dates a WarmUpTick
const WARM_UP = Pair{String,Any}[]    # the warm-up steps still to run: name => (f, args...)
const WARMING = Ref(true)              # warm-up steps remain
const WARM_UP_TASK = Ref{Any}(nothing) # the task running a warm-up step (eval.jl frames_at)

# ---- evaluations beside the main one: a subshell's cells and comm messages (beside.jl) ----

"""
    EvalCtx

One evaluation beside the main one (an EXS or COS request), which every task it starts
inherits (compat.jl, `current_ctx`): their output is routed to it in the stdout pipe, their
frames carry its id, and an INT frame reaches its task. It holds for that evaluation what
CURRENT, IN_USER, PENDING_INTERRUPT hold for the main one.
"""
mutable struct EvalCtx
    id::Int
    task::Task                   # the worker task running it (the listener's until one takes it)
    in_user::Bool                # the task is inside user code (IN_USER's counterpart)
    pending_interrupt::Bool      # an interrupt arrived while the server held the task
    cancelled::Bool              # an INT frame asked it to stop (its subshell was deleted)
    out_head::Vector{UInt8}      # the pipe code before its stdout bytes (capture.jl, ROUTE)
    err_head::Vector{UInt8}      # ... and before its stderr bytes
end

# EXS and COS requests with their contexts, for the beside workers (long-lived: see beside.jl)
const BESIDE_QUEUE = Channel{Tuple{EvalCtx,Union{Evaluation,CommDelivery}}}(Inf)
const BESIDE = Dict{Int,EvalCtx}()     # beside evaluations received and not yet answered, by id
const BESIDE_ENDED = Set{Int}()        # recently answered ones: a late INT for them is no main's
const BESIDE_WORKERS = Ref(0)          # worker tasks started (never more than ran at once)
const BESIDE_IDLE = Ref(0)             # workers waiting for a request
const BESIDE_WAITING = Ref(0)          # requests queued that no worker took yet
const SHELLS_USED = Ref(false)         # a beside evaluation ran: writes ask whose task they are

"""
What `Base.active_repl_backend` holds while the server runs: the interrupt sink (see
install_interrupt_sink!), with the fields Base and the REPL read.
"""
mutable struct Backend
    backend_task::Task
    in_eval::Bool
    ast_transforms::Vector{Any}   # honoured like the REPL's (Revise pushes to it)
end
const BACKEND = Ref{Backend}()         # set by install_interrupt_sink!

# ---- output: fd 1 and 2, drain markers, write buffering (capture.jl) ----

const PIPES = Dict{String,Any}()       # "stdout"/"stderr" => write end of our pipe
const STDERR_PIPE = Ref{Any}(nothing)  # PIPES["stderr"], read on every write (capture.jl)
# Filled in by __init__ with a random marker per process: a value made while precompiling would
# be the same in every process that loads the cache.
const MARK = UInt8[]
const TO_STDERR = UInt8[]             # Julia's stderr in the stdout pipe (StdioContext)
const TO_STDOUT = UInt8[]             # and back to stdout after it
const ROUTE = UInt8[]                 # a beside evaluation's output follows (EvalCtx heads)
const MARKS_SEEN = Dict("stdout" => 0, "stderr" => 0)   # markers each pump has passed
const MARKS_SENT = Ref(0)              # markers written into the pipes so far
const DRAINED = Condition()            # a pump passed a marker, or a drain's time is up
const DRAIN_DEADLINE = Ref(Inf)      # when the running drain gives up (see flusher_loop)
const WRITTEN = Ref(0)                 # bytes Julia code wrote to stdout/stderr: buffering switch
const SUPERVISOR_READS = Ref(false)    # the supervisor reads fd 1 and 2 (capture.jl)
# Descriptors of the two pipes that only we hold (never fd 1 or 2, which user code may
# redirect), asked whether the supervisor has read everything (capture.jl, pipes_read);
# empty where that cannot be asked, and every drain then writes its marker.
const PIPE_FDS = RawFD[]
const BUFFERED = Ref(false)            # Julia's writes to the pipes are buffered now
const QUIET_TICKS = Ref(0)             # quiet flusher intervals in a row while buffered

# ---- what notebook cells see and register ----

"""
    In, Out

`In[n]` is the code of notebook cell `n` and `Out[n]` the value it showed (only cells that
show one), keyed by Jupyter's execution count as in IJulia. `Out` keeps those values alive:
`empty!(Out)` or `IJulia.clear_history()` frees them.
"""
const In = Dict{Int,String}()
const Out = Dict{Int,Any}()

# Hooks run by cells (notebook cells, not user_expressions), as in IJulia: Revise's IJulia
# integration is a pre-execute hook.
const PREEXECUTE_HOOKS = Function[]
const POSTEXECUTE_HOOKS = Function[]
const POSTERROR_HOOKS = Function[]

# MIME types `IJulia.register_mime` and `register_jsonmime` add to what a bundle tries (each a
# MIME, or a group of which the first the value can show), as in IJulia src/display.jl.
const REGISTERED_MIMES = Union{MIME,Vector{MIME}}[]
const REGISTERED_JSON_MIMES = Union{MIME,Vector{MIME}}[]
const DISPLAY_COUNTER = Ref(0)         # display ids `display(x; display_id = true)` made
# What a value's bundle holds besides text/plain, per type (display.jl, bundle_mimes), for
# one world counter and set of registered types (their hashes). A table is replaced whole,
# never changed once published: threads read it without a lock, and so no interrupt can
# leave a lock held. Keyed by the type's objectid, the entry naming its type: a Dict keyed by
# the types themselves compiled its setindex! once per type (a key's type is Type{T}).
mutable struct BundleTable
    key::Tuple{UInt,UInt,UInt}
    mimes::Dict{UInt,Tuple{Type,Vector{Tuple{MIME,Bool}}}}
end
const BUNDLE_TABLE = Ref(BundleTable((UInt(0), UInt(0), UInt(0)),
                                     Dict{UInt,Tuple{Type,Vector{Tuple{MIME,Bool}}}}()))

# ---- comms (comms.jl) ----

const COMMS = Dict{String,Any}()       # comm id => Comm: every comm open on both sides

# ---- Distributed workers (distributed.jl, lifeline.jl) ----

const RELEASING = Ref(false)           # release_workers is under way: Julia is about to exit
const INTERRUPTED_AT_EXIT = Set{Int}() # workers release_workers has sent their one interrupt
const WORKER_HANDLING_COMPILED = Ref(false)   # compile_worker_handling has done its work

"""One lifeline loop (lifeline.jl's header) and the workers it will end."""
mutable struct Lifeline
    proc::Base.Process     # the detached ssh or sh; only this process holds its stdin's write end
    host::String           # for messages
    ospids::Set{Int}       # the workers the loop will end
end
# (host, string(sshflags)) => line; this machine's line is under LOCAL_KEY
const LIFELINES = Dict{Tuple{String,String},Lifeline}()
const LOCAL_LIFELINE_POSSIBLE = Ref{Union{Bool,Nothing}}(nothing)   # looked up once
