# Julia >= 1.12's default REPL AST transforms, for Julia 1.5.3.
#
# A new REPL backend starts with a copy of `REPL.repl_ast_transforms` ("defaults for new REPL
# backends"). That is `Any[softscope]` in 1.5.3 and release-1.10, and `Any[softscope,
# warn_on_non_owning_accesses]` in release-1.12 and master (JuliaLang/julia
# stdlib/REPL/src/REPL.jl; 1.12 NEWS, #54872): for `M.x` where `M` does not own `x` (`which(M,
# :x)` is not `M` or a submodule of it) and `x` is not public in `M`, it warns once "x is
# defined in Owner and is not public in M". Cells must get it too.
# Written here from that contract, not copied: 1.5.3 has no `public`, so "exported" stands for
# it, and names a cell binds locally are not told apart. A no-op where REPL has it already.
# REPL is reached through Base.require in a `let`: Main, the cells' module, gets no binding.

let REPL = Base.require(Base.PkgId(Base.UUID("3fa0cd96-eef1-5676-8a61-b3b8758bbffb"), "REPL"))
    if length(REPL.repl_ast_transforms) == 1
        Core.eval(REPL, quote
            function contract_owner_is_within(owner::Module, mod::Module)
                while true
                    owner === mod && return true
                    parentmodule(owner) === owner && return false
                    owner = parentmodule(owner)
                end
            end

            contract_module_named(::Module, ::Any) = nothing
            contract_module_named(m::Module, s::QuoteNode) = contract_module_named(m, s.value)
            function contract_module_named(m::Module, s::Symbol)
                x = isdefined(m, s) ? getfield(m, s) : nothing
                return x isa Module ? x : nothing
            end
            function contract_module_named(m::Module, ex::Expr)
                Meta.isexpr(ex, :., 2) || return nothing
                outer = contract_module_named(m, ex.args[1])
                return outer === nothing ? nothing : contract_module_named(outer, ex.args[2])
            end

            function contract_warn_non_owning!(current::Module, ast)
                ast isa Expr || return
                ast.head === :module && return
                if Meta.isexpr(ast, :., 2)
                    mod = contract_module_named(current, ast.args[1])
                    name = ast.args[2] isa QuoteNode ? ast.args[2].value : ast.args[2]
                    if mod !== nothing && name isa Symbol && isdefined(mod, name)
                        owner = which(mod, name)
                        if !contract_owner_is_within(owner, mod) && !Base.isexported(mod, name)
                            @warn string(name, " is defined in ", owner, " and is not public in ",
                                         mod) maxlog = 1 _id = string("repl-warning-", mod, "-",
                                                                      owner, "-", name)
                        end
                    end
                    return
                end
                foreach(arg -> contract_warn_non_owning!(current, arg), ast.args)
            end

            function warn_on_non_owning_accesses(ast)
                contract_warn_non_owning!(Main, ast)
                return ast
            end
            push!(repl_ast_transforms, warn_on_non_owning_accesses)
        end)
    end

    # The emulation must hold, or the tests that preload it prove nothing.
    length(REPL.repl_ast_transforms) == 2 && REPL.repl_ast_transforms[1] === REPL.softscope ||
        error("contracts/repl_ast_transforms.jl: the contract did not take hold")
end
