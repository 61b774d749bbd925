from tcqa_data.cli import main

main()
