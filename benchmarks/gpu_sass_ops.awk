# Counts a cuobjdump -sass listing's instructions per kernel (the float64, atomic, shuffle, barrier,
# load and local-memory ones), for benchmarks/gpu.sh's profile step.
/Function :/ { f = $3 }
/\/\*[0-9a-f]+\*\// {
  line = $0
  sub(/^[ \t]*\/\*[0-9a-f]+\*\/[ \t]*/, "", line)
  sub(/^@!?U?P[0-9T]+[ \t]+/, "", line)
  split(line, a, /[ ;]/)
  n[f " " a[1]]++
}
END { for (k in n) if (k ~ /ATOM|RED|MUFU|DFMA|DMUL|DADD|SHFL|LDL|STL|BAR|LDG|LDS|CAS/) print n[k], k }
