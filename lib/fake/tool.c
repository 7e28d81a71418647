/* The stand-in for the driver's other utilities on a simulated node
 * (nvidia-debugdump, nvidia-persistenced, nvidia-cuda-mps-control,
 * nvidia-cuda-mps-server): one program, installed under each name, that says
 * which one it is and does nothing else. */
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
    const char* name = argc > 0 && argv[0] != NULL ? argv[0] : "nvidia-tool";
    const char* slash = strrchr(name, '/');
    printf("%s (gpubind simulated node)\n", slash != NULL ? slash + 1 : name);
    return 0;
}
