"""The typer CLI (PRODUCT.md §2): one module per command group, each parsing its options,
calling one library function and rendering the result.

`app` holds the shared app, consoles, the error edge and JSON output; `main` imports
every command module (the import order is the help order) and holds the console-script
entry points.
"""
