#!/bin/sh
# man_help.sh GCC_GRAPH: every option and environment variable that a command's --help names is in
# the man page, and every command the man page's synopsis names answers --help. Prints what is
# missing; exits 1 if anything is.
GG=$1
man=$(sed 's/\\-/-/g; s/\\f[BIRP]//g' man/gcc-graph.1)
bad=0
for cmd in "" compile run bench explain check minify compare; do
  help=$("$GG" $cmd --help) || { echo "gcc-graph $cmd --help fails"; bad=1; continue; }
  for opt in $(echo "$help" | grep -oE '(^|[ ,\[])(--[a-z][a-z-]*|-[A-Z]{1,2}|-[a-z]\b|GCC_GRAPH_[A-Z_]+)' | sed 's/^[ ,\[]//' | sort -u); do
    case "$opt" in -h|-v|-o|-S|-j) continue;; esac   # short options: checked by their long descriptions
    echo "$man" | grep -qF -- "$opt" || { echo "man page lacks $opt (gcc-graph $cmd --help names it)"; bad=1; }
  done
done
for cmd in $(echo "$man" | sed -n '/^\.SH SYNOPSIS/,/^\.SH/p' | sed -n 's/^\.B gcc-graph \([a-z]*\)$/\1/p'); do
  "$GG" $cmd --help >/dev/null 2>&1 || { echo "man page names 'gcc-graph $cmd', which has no --help"; bad=1; }
done
exit $bad
