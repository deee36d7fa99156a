/* sweep_rules.c: the fixture of tests/mutants/sweep_rules.sh (never compiled): what sweep.py
 * may and may not mutate. Comments (a < b && c + 1), strings and preprocessor lines stay. */
#include <stdio.h>
#define TWICE(x) ((x) + (x) > 0)
static int count(const int *v, int n, int *errors) {
  char buf[16];   /* an array size in a declaration: not a constant to mutate */
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (v[i] == -1) continue;
    if (v[i] >= 2 && v[i] != 7) k = k + v[i];
    else (*errors)++;
    k++;
  }
  snprintf(buf, sizeof buf, "<%d>", k - 1);   // "<" in a string, a comment: untouched
  puts(buf);
  while (k > 100) { k -= 3; break; }
  return k || *errors;
}
int main(void) { int e = 0, v[2] = {2, 3}; return count(v, 2, &e) == 0 ? 1 : 0; }
