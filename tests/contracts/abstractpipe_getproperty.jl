# Julia >= 1.7's contract on AbstractPipe's fields, for Julia 1.5.3.
#
# Since 1.7 Base defines `getproperty(pipe::AbstractPipe, name::Symbol)`: the fields `in`,
# `out`, `err`, `in_stream`, `out_stream` and `err_stream`, where a subtype has them, must be
# `IO`, and reading any other kind of value there throws a TypeError (JuliaLang/julia
# release-1.10, release-1.12 and master base/io.jl, beside `abstract type AbstractPipe`).
# A field `err::Bool` on our stdout type made every print fail on 1.7+.
# Written here from that contract, not copied; a no-op where Base has it already.

if !hasmethod(getproperty, Tuple{Base.AbstractPipe,Symbol}) ||
        which(getproperty, Tuple{Base.AbstractPipe,Symbol}).sig === Tuple{typeof(getproperty),Any,Symbol}
    Core.eval(Base, quote
        function getproperty(pipe::AbstractPipe, name::Symbol)
            value = getfield(pipe, name)
            if name in (:in, :out, :err, :in_stream, :out_stream, :err_stream)
                return value::IO
            end
            return value
        end
    end)
end

# The emulation must hold, or the tests that preload it prove nothing.
module AbstractPipeContractProbe
struct ProbePipe <: Base.AbstractPipe
    err::Bool
end
try
    ProbePipe(false).err
    error("contracts/abstractpipe_getproperty.jl: the contract did not take hold")
catch e
    e isa TypeError || rethrow()
end
end
