# state.jl: limits, and the server's state (one server per process), all in one place.

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
const RICH_MIMES = ("text/html", "text/markdown", "text/latex", "image/svg+xml",
                    "image/png", "image/jpeg", "application/json")
const BINARY_MIMES = ("image/png", "image/jpeg")
# MIME types `IJulia.register_mime` and `register_jsonmime` add to what a bundle tries (each a
# MIME, or a group of which the first the value can show), as in IJulia src/display.jl.
const REGISTERED_MIMES = Union{MIME,Vector{MIME}}[]
const REGISTERED_JSON_MIMES = Union{MIME,Vector{MIME}}[]
const DISPLAY_SIZE = (30, 100)

const SOCK = Ref{Union{Base.PipeEndpoint, TCPSocket}}()   # see connect_supervisor
const DIAG = Ref{IO}()                 # the process's original stdout: the startup log
const EVAL_TASK = Ref{Task}()
const CELL_TASK = Ref{Union{Nothing,Task}}(nothing)   # the running cell's own task, where
                                                      # cells get one (compat.jl, in_cell_task)
const CURRENT = Ref(0)                 # id of the running evaluation, 0 when idle
const LAST_ID = Ref(0)                 # parent of output produced between evaluations
const IN_USER = Ref(false)             # the evaluating task is inside user code
const PENDING_INTERRUPT = Ref(false)   # an interrupt arrived while the server held the task
const INTERRUPTED_BEFORE_START = Ref(0) # id of a queued evaluation interrupted before it ran
const CLAIMS_DIR = Ref("")             # where INT frames and SIGINTs race for requests ("": none)

"""An EXE or EXN request: code for the evaluation loop, queued in arrival order."""
struct Evaluation
    id::Int          # the evaluation's id, which every frame about it carries
    code::String
    name::String     # what backtraces call the code: In[<id>], or EXN's <name>
    named::Bool      # an EXN: the name gives a notebook cell's number (In, Out, hooks)
end

"""
    WarmUpTick(generation)

The flusher's word that Julia has been idle for a whole `IDLE_BEFORE_WARM_UP`: the evaluation
loop may run one warm-up step. It travels in QUEUE, the one thing the loop waits on, so it can
never overtake a request queued before it; the loop drops it when a request is waiting behind
it, or when an evaluation was taken since the idle interval began (`generation`).
"""
struct WarmUpTick
    generation::Int  # IDLE_GENERATION when the idle interval began
end

const QUEUE = Channel{Union{Evaluation,WarmUpTick}}(Inf)   # what the evaluation loop takes
const INPUT_WAIT = Ref{Union{Nothing,Channel{Any}}}(nothing)
const PIPES = Dict{String,Any}()       # "stdout"/"stderr" => write end of our pipe
const STDERR_PIPE = Ref{Any}(nothing)  # PIPES["stderr"], read on every write (capture.jl)
# Filled in by __init__ with a random marker per process: a value made while precompiling would
# be the same in every process that loads the cache.
const MARK = UInt8[]
const TO_STDERR = UInt8[]             # Julia's stderr in the stdout pipe (StdioContext)
const TO_STDOUT = UInt8[]
const MARKS_SEEN = Dict("stdout" => 0, "stderr" => 0)
const MARKS_SENT = Ref(0)
const DRAINED = Condition()
const DRAIN_DEADLINE = Ref(Inf)      # when the running drain gives up (see flusher_loop)
const WRITTEN = Ref(0)                 # bytes Julia code wrote to stdout/stderr: buffering switch
const SUPERVISOR_READS = Ref(false)    # the supervisor reads fd 1 and 2 (capture.jl)
const BUFFERED = Ref(false)
const QUIET_TICKS = Ref(0)
const COLOR = Ref(false)               # Julia runs with --color=yes: stdout, stderr, tracebacks
const STARTUP_PENDING = Ref(false)     # the startup file still has to run (in the first cell)
const LOADED_FROM = Ref("source")      # "cache" when server.jl loaded the compiled package
