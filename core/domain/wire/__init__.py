"""What comes in and goes out as text: ApiServerSource's CloudEvents (`apiserversource`), JSON
(`jsoncodec`), the shapes of objects and errors (`shapes`), identities (`identity`), durations
(`durations`).
"""
