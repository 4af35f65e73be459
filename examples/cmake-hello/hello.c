#include <stdio.h>
int main(void) { puts("hello from CMake"); return 0; }
