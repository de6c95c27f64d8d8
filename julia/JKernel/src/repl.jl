# repl.jl: the REPL's cell semantics: history (In/Out), hooks, `]` and `;` modes, soft scope.
# What differs by Julia version (ans/err, Pkg, ^C as a cancellation) is in compat.jl.

# `In`, `Out`, the hooks and SOFTSCOPE are in state.jl.

run_hooks(hooks) = foreach(Base.invokelatest, copy(hooks))

"""The execution count of a cell named `In[n]` (what the kernel sends), else `id`."""
function cell_number(name::String, id::Int)
    m = match(r"^In\[([0-9]{1,9})\]$", name)
    return m === nothing ? id : parse(Int, m.captures[1])
end

"""
    mode_line(code) -> Union{String,Nothing}

The one command of a `?`, `]` or `;` cell, as IJulia finds it: blank and `#` comment lines are
ignored, and exactly one line must remain.
"""
function mode_line(code::String)
    found = nothing
    for line in eachline(IOBuffer(code))
        stripped = strip(line)
        (isempty(stripped) || startswith(stripped, '#')) && continue
        found === nothing || return nothing
        found = String(stripped)
    end
    return found !== nothing && first(found) in ('?', ']', ';') ? found : nothing
end

"""Evaluate a cell: a REPL mode command, or Julia code through the backend's AST transforms."""
function eval_cell(mod::Module, code::String, filename::String)
    line = mode_line(code)
    if line !== nothing
        rest = strip(line[nextind(line, 1):end])
        # help as the cell's value, saved with the notebook as IJulia does; apropos prints
        first(line) == '?' && return eval_help(REPL.helpmode(stdout, String(rest)))
        first(line) == ']' && return pkg_mode(rest)
        return shell_mode(mod, rest)
    end
    ast = local_ijulia_imports(parse_cell(code, filename))
    # BACKEND is unset only in the precompile workload, which runs cells before serve does.
    for f in (isassigned(BACKEND) ? BACKEND[].ast_transforms : Any[])
        ast = Base.invokelatest(f, ast)
    end
    return Core.eval(mod, ast)
end

"""`] cmd`: Pkg's REPL mode against the active project. Pkg loads on first use (~1 s)."""
pkg_mode(cmd::AbstractString) = Base.invokelatest(pkg_command, load_pkg(), String(cmd))

"""
    shell_mode(mod, line)

`;cmd`: the REPL's shell mode, with `\$` interpolation from `mod` and `cd` changing the kernel's
directory. The command runs through \$JULIA_SHELL / \$SHELL like the REPL's (base/client.jl,
`repl_cmd`), with its output captured at the fd level; an interrupt ends the command too,
as Ctrl-C at the REPL does by signalling its process group.
"""
function shell_mode(mod::Module, line::AbstractString)
    cmd = Core.eval(mod, :(Base.cmd_gen($(Base.shell_parse(String(line))[1]))))
    (isempty(cmd.exec) || cmd.exec[1] == "cd") && return Base.repl_cmd(cmd, stdout)
    cmd.exec .= expanduser.(cmd.exec)
    cmd = through_user_shell(cmd)
    # A process group of its own (detach), so that an interrupt can end the shell and what it
    # started, as Ctrl-C does to a terminal's foreground group.
    proc = run(pipeline(Cmd(ignorestatus(cmd); detach = true);
                        stdin = devnull, stdout = stdout, stderr = stderr); wait = false)
    try
        wait(proc)
    catch
        quietly() do
            signal_group(proc, 2)                         # SIGINT
            # Polled each millisecond: the command mostly ends at once, and the default
            # interval (0.1 s, base/asyncevent.jl) was most of the reply time (bench: 104 ms).
            timedwait(() -> !process_running(proc), 2.0; pollint = 0.001)
            process_running(proc) && signal_group(proc, 9)  # SIGKILL
        end
        rethrow()
    end
    nothing
end

signal_group(proc, sig) = Sys.iswindows() ? kill(proc, sig) :
    ccall(:kill, Cint, (Cint, Cint), -getpid(proc), sig)

"""
    local_ijulia_imports(ast)

Every `using`/`import` of `IJulia` or of a path below it (`import IJulia.CommManager: Comm`,
`using IJulia: clear_output`, `import IJulia.CommManager as CM`) binds the kernel's own `IJulia`
module (ijulia.jl) instead of loading the package: in Main the name is already taken, and the
package's functions need a kernel of its own. The path is made absolute, `Main.IJulia...`, so it
resolves alike in a cell, inside a user's `module M ... end` and in an `include`d file: a call
`include(path)` passes this function to Base's `include(mapexpr, path)` (Julia 1.5+), which
applies it to each expression of the file. A path the kernel's module lacks is an error naming
it. Quoted code and macro calls are left as written: a macro such as `@everywhere` sends its
expression to processes that have no kernel module.
"""
function local_ijulia_imports(@nospecialize(ast))   # one method for every kind of node
    ast isa Expr || return ast
    head = ast.head
    head in (:quote, :inert, :macrocall) && return ast
    if head === :using || head === :import
        lacking = ijulia_path_lacking(ast)
        lacking === nothing || return :(throw(ArgumentError($lacking)))
        return Expr(head, Any[kernel_ijulia_path(a) for a in ast.args]...)   # no eltype to find at run time
    elseif head === :call && length(ast.args) == 2 && ast.args[1] === :include &&
            !(ast.args[2] isa Expr && ast.args[2].head in (:..., :kw, :parameters))
        return include_mapped(local_ijulia_imports(ast.args[2]))
    end
    # Rebuilt only where something changed: an included file's expressions mostly pass as is.
    # A definition's signature (`include(x::Int) = ...`) is not a call: only its body is read.
    args = ast.args
    first = (head === :function || head === :(=)) && length(args) == 2 && is_signature(args[1]) ? 2 : 1
    for i in first:length(args)
        arg = args[i]
        new = local_ijulia_imports(arg)
        new === arg && continue
        args === ast.args && (args = copy(ast.args))
        args[i] = new
    end
    return args === ast.args ? ast : Expr(head, args...)
end

# `include(path)` as `include(local_ijulia_imports, path)` where that `include` takes a mapexpr
# (the one every module has) and `path` is a path, else as written: a user's own `include`
# method stays theirs. `include.(paths)` is left as written.
# Inline, so that no frame of ours sits between the cell and the included file's code.
# Built without line numbers: any would name this file, and user_backtrace cuts there.
function include_mapped(arg)
    f, x, map = gensym("include"), gensym("path"), local_ijulia_imports
    bind = Expr(:block, Expr(:(=), f, :include), Expr(:(=), x, arg))
    mapped = Expr(:&&, Expr(:call, isa, x, AbstractString), Expr(:call, applicable, f, map, x))
    call = Expr(:if, mapped, Expr(:call, f, map, x), Expr(:call, f, x))
    return Expr(:let, bind, Expr(:block, call))
end

is_signature(@nospecialize(ex)) = ex isa Expr && (ex.head === :call ||
    (ex.head in (:where, :(::)) && !isempty(ex.args) && is_signature(ex.args[1])))

# The paths of one `using`/`import`: `A.B`, `A.B: x, y as z` (head `:`), `A.B as C` (1.6+).
is_ijulia_path(p) = p isa Expr && p.head === :. && !isempty(p.args) && p.args[1] === :IJulia

function kernel_ijulia_path(p)
    is_ijulia_path(p) && return Expr(:., :Main, p.args...)
    if p isa Expr && (p.head === :(:) || p.head === :as) && !isempty(p.args)
        return Expr(p.head, kernel_ijulia_path(p.args[1]), p.args[2:end]...)
    end
    return p
end

"""What `ex` (a `using` or `import`) asks of the kernel's IJulia that it lacks, or `nothing`."""
function ijulia_path_lacking(ex::Expr)
    for p in ex.args
        names = Any[]
        if p isa Expr && (p.head === :(:) || p.head === :as)
            p.head === :(:) && append!(names, p.args[2:end])
            p = p.args[1]
        end
        is_ijulia_path(p) || continue
        m = IJulia
        for (i, name) in enumerate(p.args[2:end])
            if !(m isa Module && name isa Symbol && isdefined(m, name))
                return ijulia_lacks(join(p.args[1:i+1], '.'), join(p.args[1:i], '.'), name)
            end
            m = getfield(m, name)
        end
        for n in names
            n = n isa Expr && n.head === :as ? n.args[1] : n
            name = n isa Expr && n.head === :. && length(n.args) == 1 ? n.args[1] : n
            if !(m isa Module && name isa Symbol && isdefined(m, name))
                return ijulia_lacks("$(join(p.args, '.')): $name", join(p.args, '.'), name)
            end
        end
    end
    return nothing
end

ijulia_lacks(written, owner, name) = string("`", written, "`: `", owner, "` has no `", name,
    "` in this kernel. Its IJulia is the kernel's own module, with IJulia's notebook API ",
    "(clear_output, CommManager, display hooks, ...), not the IJulia package ",
    "(jutul-jkernel's docs/ijulia-packages.md)")
