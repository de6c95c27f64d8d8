# Julia >= 1.6's start-up streams, for Julia 1.5.3.
#
# Since JuliaLang/julia#36689 `Base.reinit_stdio` wraps a `stdout` or `stderr` that is not a TTY
# in `IOContext(stream, :color => ...)` whenever a colour flag (--color=yes/no) was given
# (base/libuv.jl `reinit_stdio` on release-1.10, `_reinit_stdio` on release-1.12 and master).
# 1.5.3 hands the bare `PipeEndpoint`. The kernelspec always passes --color, and start-up once
# read `stderr.handle`, which an IOContext lacks: JKernel did not start on any real 1.6+.
# Written here from that contract, not copied; a no-op where Base wraps the streams already.

let opts = Base.JLOptions()
    if opts.color != 0
        for name in (:stdout, :stderr)
            io = getfield(Base, name)
            if !(io isa Base.TTY) && !(io isa IOContext)
                Core.eval(Base, :($name = IOContext($io, :color => $(opts.color == 1))))
            end
        end
    end
end

# The emulation must hold, or the tests that preload it prove nothing: the supervisor always
# passes a colour flag and gives Julia pipes.
Base.JLOptions().color != 0 && !(stderr isa IOContext) &&
    error("contracts/stdio_iocontext.jl: the contract did not take hold")
