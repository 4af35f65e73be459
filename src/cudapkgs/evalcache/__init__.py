"""The evaluation cache: a command's answer kept while every input it read is unchanged.

`entry` is the file format and the key (the command line, the working directory, the
environment, the interpreter); `record` watches one evaluating command (every file it
opened, stat'ed or listed, every module it imported) and writes the entry; `lookup` is the
fast path tried before the command line is even parsed, importing nothing but `os`,
`sys`, `stat` and `zlib`.  See docs/eval-cache.md.  Nothing here is imported by another room
except the command line and the ``python -m cudapkgs`` front door.
"""
