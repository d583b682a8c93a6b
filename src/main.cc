#include "cli/cli.h"

int main(int argc, char** argv) { return stallscope::cli::Run(argc, argv); }
