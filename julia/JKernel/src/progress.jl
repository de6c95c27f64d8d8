# progress.jl: `JKernel.progress`, a progress bar drawn with \r redraws.

const PROGRESS_WIDTH = 30
const PROGRESS_INTERVAL = 0.1   # seconds between redraws: enough to look live, few messages

struct ProgressIterator{I}
    itr::I
    desc::String
end

mutable struct ProgressState
    total::Int          # -1 when the length is unknown
    count::Int
    started::Float64
    drawn::Float64
end

"""
    JKernel.progress(itr; desc="")

Iterate over `itr` while a progress bar redraws in place on stdout (`\r`, at most
10 times a second): JupyterLab and `jupyter console` update it where it is, a stored notebook
shows its last state. `for x in JKernel.progress(xs; desc="fitting") ... end`
"""
progress(itr; desc::AbstractString = "") = ProgressIterator(itr, String(desc))

Base.IteratorSize(::Type{ProgressIterator{I}}) where {I} = Base.IteratorSize(I)
Base.IteratorEltype(::Type{ProgressIterator{I}}) where {I} = Base.IteratorEltype(I)
Base.eltype(::Type{ProgressIterator{I}}) where {I} = eltype(I)
Base.length(p::ProgressIterator) = length(p.itr)
Base.size(p::ProgressIterator, d...) = size(p.itr, d...)

function Base.iterate(p::ProgressIterator)
    total = Base.IteratorSize(p.itr) isa Union{Base.HasLength,Base.HasShape} ? length(p.itr) : -1
    st = ProgressState(total, 0, time(), 0.0)
    draw_progress(p, st, false)
    return progress_step(p, st, iterate(p.itr))
end
Base.iterate(p::ProgressIterator, (inner, st)) = progress_step(p, st, iterate(p.itr, inner))

function progress_step(p::ProgressIterator, st::ProgressState, next)
    if next === nothing
        draw_progress(p, st, true)
        return nothing
    end
    st.count += 1
    now = time()
    if now - st.drawn >= PROGRESS_INTERVAL
        draw_progress(p, st, false)
    end
    return next[1], (next[2], st)
end

function draw_progress(p::ProgressIterator, st::ProgressState, final::Bool)
    done = final ? max(st.count, st.total) : st.count
    elapsed = time() - st.started
    io = IOBuffer()
    print(io, '\r')
    isempty(p.desc) || print(io, p.desc, ' ')
    if st.total >= 0
        frac = st.total == 0 ? 1.0 : min(1.0, done / st.total)
        filled = round(Int, frac * PROGRESS_WIDTH)
        print(io, '[', repeat('#', filled), repeat(' ', PROGRESS_WIDTH - filled), "] ",
              done, '/', st.total, ' ', lpad(round(Int, 100 * frac), 3), '%')
        if !final && 0 < frac < 1
            print(io, "  ETA ", format_seconds(elapsed / frac - elapsed))
        end
    else
        print(io, done, " done")
    end
    final && print(io, "  in ", format_seconds(elapsed), '\n')
    st.drawn = time()
    write(stdout, take!(io))
    flush(stdout)
end

format_seconds(s::Real) = s < 60 ? string(round(s; digits = 1), " s") :
    string(div(round(Int, s), 60), " min ", rem(round(Int, s), 60), " s")
